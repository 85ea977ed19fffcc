"""Import as ``from helpers import check`` (tests/ is on sys.path under pytest's rootdir conftest)."""
from conftest import check  # noqa: F401
