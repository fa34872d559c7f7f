"""Every seed generator's state goes to its own layer in a copy (issue 35, section 3).

A copy that gave the forward layer of a Bidirectional the backward layer's state (or one dropout's
state to another) would train on other masks without a word. The issue's model and the wrappers
that hold or clone layers with generators (Bidirectional, which rebuilds its layers from their
config; RNN over stacked cells; TimeDistributed), and layers with two generators of their own,
are trained first (so every counter has moved) and copied through ``copy.deepcopy`` and through
``pickle`` into a fresh process: every variable equal position by position, and the next training
step bit for bit.
"""

from __future__ import annotations

import copy
import functools
import json
import pickle
from pathlib import Path

import keras
import pytest
import seed_models
from helpers import REPO_DIR, TESTS_DIR, run_python

pytestmark = pytest.mark.backends  # generator states and dropout kernels are the backend's

HERE = Path(__file__).resolve().parent
"""This folder, where seed_models.py is."""

CASES = sorted(seed_models.HIDDEN)


@functools.cache
def trained(name: str) -> keras.Model:
    """:func:`seed_models.build`, once per case for the whole file (training the recurrent models is
    the slow part, JAX's most of all). The tests train it on further; each compares a copy with the
    model as it is when copied."""
    return seed_models.build(name)


@pytest.mark.parametrize("name", CASES)
def test_deepcopy_gives_each_generator_its_own_state_and_trains_identically(name):
    model = trained(name)
    twin = copy.deepcopy(model)
    assert seed_models.values(twin) == seed_models.values(model)
    assert seed_models.next_step(twin) == seed_models.next_step(model)


def test_a_fresh_process_gives_each_generator_its_own_state_and_trains_identically(tmp_path):
    expected = {}
    for i, name in enumerate(CASES):
        model = trained(name)
        (tmp_path / f"{i}.pkl").write_bytes(pickle.dumps(model, protocol=5))
        expected[name] = [seed_models.values(model).copy(), seed_models.next_step(model)]
    seen = run_python(
        f"""
        import json, pickle
        import seed_models
        out = {{}}
        for i, name in enumerate({CASES!r}):
            with open({str(tmp_path)!r} + f"/{{i}}.pkl", "rb") as f:
                model = pickle.load(f)
            out[name] = [[v.hex() for v in seed_models.values(model)], [v.hex() for v in seed_models.next_step(model)]]
        print(json.dumps(out))
        """,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{HERE}:{TESTS_DIR}:{REPO_DIR}"},
        timeout=600,
        keras_imported=True,
    )
    got = json.loads(seen.strip().splitlines()[-1])
    for name in CASES:
        loaded, stepped = ([bytes.fromhex(v) for v in values] for values in got[name])
        assert len(loaded) == len(expected[name][0]), name
        differ = [i for i, (a, b) in enumerate(zip(loaded, expected[name][0])) if a != b]
        assert not differ, f"{name}: variables {differ} differ after loading"
        if keras.backend.backend() != "torch":
            # PyTorch draws an unseeded dropout from torch's global generator, which a fresh process's
            # first step draws from in its own way (the guide says so): its states are compared above.
            assert stepped == expected[name][1], f"{name}: the next step differs"


def test_the_models_train_their_generators_so_a_swapped_state_would_show():
    """Every case's generator states differ pairwise after training, and swapping two changes the next step:
    equal values in a copy prove each state went to its own generator."""
    for name in CASES:
        model = trained(name)
        states = seed_models.seed_states(model)
        assert len(states) >= 3 and len(set(states)) == len(states), name
    # Its state generator draws normal noise, which reads the state on every backend (PyTorch draws an
    # unseeded dropout from torch's global generator instead).
    model = trained("Bidirectional cell with two generators")
    twin = copy.deepcopy(model)
    generators = [v for v in twin.variables if v.name == "seed_generator_state"]
    first, second = (keras.ops.convert_to_numpy(v.value) for v in generators[:2])
    generators[0].assign(second)
    generators[1].assign(first)
    assert seed_models.next_step(twin) != seed_models.next_step(model)
