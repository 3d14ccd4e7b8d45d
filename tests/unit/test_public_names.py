"""The public names stay where users import them from, whichever folder holds their code.

``stampede`` resolves most of its names lazily (by module path), and ``stampede.aio`` is a face
of re-exports over the layers' ``_async/`` folders: both are checked name by name here.
"""

from __future__ import annotations

import pytest

import stampede
import stampede.aio

#: ``stampede.aio``'s names, and the layer whose ``_async/`` folder holds each.
ASYNCIO_FACE = {
    "BloomFilter": "bloom",
    "Filler": "fill",
    "Mutex": "lock",
    "RedisStore": "fill",
    "Redlock": "lock",
}


@pytest.mark.parametrize("name", stampede.__all__)
def test_every_public_name_of_stampede_resolves(name):
    assert getattr(stampede, name) is not None


@pytest.mark.parametrize(("name", "layer"), ASYNCIO_FACE.items())
def test_stampede_aio_names_the_asyncio_twin_of_stampedes_own(name, layer):
    twin, own = getattr(stampede.aio, name), getattr(stampede, name)
    assert twin.__module__.startswith(f"stampede.{layer}._async.")
    assert own.__module__.startswith(f"stampede.{layer}._sync.")
    assert (twin.__name__, twin is own) == (name, False)


def test_stampede_aio_is_only_its_face():
    assert sorted(stampede.aio.__all__) == sorted(ASYNCIO_FACE)
