"""The contracts of the tile ops: for each node of ir/tileop.py, its text, its meaning on the
reference interpreter and its cost-model charges, in one place (ir/tileop.py's
TileOpContract). Importing this package registers them; importing tilecraft does.

These modules import the interpreter's and the cost model's helpers; the printer, the
interpreter and the cost model find a contract through ir's registry and never import this
package, so the packages stay free of import cycles. A backend registers its lowering of each
node class in a table of its own (backends/cuda/tileops/dispatch.py).
"""
from . import arithmetic, data_movement, directives  # noqa: F401  (registration)
