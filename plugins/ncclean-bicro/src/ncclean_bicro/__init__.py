"""BiCro for ncclean, installed as a plugin through the ``ncclean.methods`` entry point."""

from ncclean_bicro.method import BiCro

__all__ = ["BiCro"]
