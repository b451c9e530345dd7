"""Every tile op has its whole contract: a target-neutral text, interpreter rule and cost rule
(tilecraft/ops, registered in ir/tileop.py) and a CUDA lowering (backends/cuda/tileops/
dispatch.py). A node class added without them fails here rather than deep in a pass."""
from __future__ import annotations

import dataclasses

import pytest

import tilecraft  # noqa: F401  (registers the contracts)
from tilecraft.backends.cuda.tileops.dispatch import LOWERINGS
from tilecraft.ir import tileop
from tilecraft.ir.tileop import TileOp, TileOpContract, registered_contracts


def _node_classes(base=TileOp) -> list:
    out = []
    for cls in base.__subclasses__():
        out.append(cls)
        out.extend(_node_classes(cls))
    return out


NODES = [c for c in _node_classes() if c.__module__ == tileop.__name__]


def test_the_tile_op_nodes_are_found():
    assert {"Copy", "Gemm", "Reduce", "CumSum", "Fill", "Atomic"} <= {c.__name__ for c in NODES}


@pytest.mark.parametrize("node", NODES, ids=lambda c: c.__name__)
def test_every_tile_op_has_every_rule_of_its_contract(node):
    contract = registered_contracts().get(node)
    assert isinstance(contract, TileOpContract), f"{node.__name__} has no contract in tilecraft/ops"
    for rule in dataclasses.fields(TileOpContract):
        assert callable(getattr(contract, rule.name)), (node.__name__, rule.name)


@pytest.mark.parametrize("node", NODES, ids=lambda c: c.__name__)
def test_every_tile_op_has_a_cuda_lowering(node):
    assert callable(LOWERINGS.get(node)), f"{node.__name__} has no entry in LOWERINGS"


def test_a_node_class_has_one_contract():
    copy = registered_contracts()[tileop.Copy]
    with pytest.raises(ValueError):
        tileop.register_contract(tileop.Copy, copy)


def test_an_op_without_a_contract_is_an_internal_error_not_a_key_error():
    @dataclasses.dataclass(eq=False, repr=False)
    class Unknown(TileOp):
        op_name = "unknown"
        span: object = None

    with pytest.raises(tilecraft.TileError, match="no contract"):
        tileop.contract_of(Unknown())
