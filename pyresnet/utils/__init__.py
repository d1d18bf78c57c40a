"""Utilities with Keras names: seeding (``set_random_seed``), session reset
(``clear_session``) and nested-structure helpers (``utils.tree``)."""
from .naming import clear_session
from .rng import get_rng, set_random_seed

__all__ = ["set_random_seed", "clear_session", "get_rng"]
