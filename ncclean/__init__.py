"""ncclean: find and fix mismatched pairs in image-caption corpora.

Nothing is imported here on purpose: ``ncclean --help`` must stay fast, so heavy modules (torch,
pyarrow, scikit-learn) load only when a command needs them. Python users start from
:mod:`ncclean.api`.
"""

__version__ = "0.1.0"
