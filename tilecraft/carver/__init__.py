"""Tile recommendation (paper section 4.2): hardware models, a roofline cost model over a
kernel's FTG, and a ranked list of legal configurations for a @tilecraft.jit factory."""
from ..target import TARGETS, Target, get_target
from .cost import Cost, Resources, estimate, estimate_launch, resources
from .recommend import Candidate, default_space, recommend
from . import arch  # noqa: F401  (TileLang's carver.arch)

__all__ = ["TARGETS", "Target", "get_target", "Cost", "Resources", "estimate",
           "estimate_launch", "resources", "Candidate", "default_space", "recommend", "arch"]
