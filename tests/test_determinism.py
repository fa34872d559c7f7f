"""Determinism and concurrency: the same model pickles to the same bytes."""

from __future__ import annotations

import json
import os
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zoo
from helpers import REPO_DIR, TESTS_DIR, assert_same_state, run_python

import keras_pickle
from keras_pickle._inspect import Global, _evaluate

NAMES = ["functional", "subclassed"]
# Between them: a nested Sequential, auto-named sublayers, seed generators, a
# registered layer and a registered subclassed model (two lookup keys each).
CROSS_PROCESS_NAMES = ["functional", "registered_subclassed"]


@pytest.fixture(scope="module")
def models():
    return {name: zoo.trained(zoo.BUILDERS[name]) for name in NAMES}


def test_two_dumps_give_identical_bytes(models):
    for name, model in models.items():
        for protocol in (0, 2, 5):
            assert pickle.dumps(model, protocol=protocol) == pickle.dumps(model, protocol=protocol), name
        assert keras_pickle.dumps(model, checksum=True) == keras_pickle.dumps(model, checksum=True), name
        assert keras_pickle.dumps(model) == pickle.dumps(model, protocol=5), name
        first, second = [], []
        assert keras_pickle.dumps(model, buffer_callback=first.append) == keras_pickle.dumps(
            model, buffer_callback=second.append
        )
        assert [bytes(b.raw()) for b in first] == [bytes(b.raw()) for b in second]


# --------------------------------------------------------------------------
# Across processes
# --------------------------------------------------------------------------

CROSS_PROCESS_ENV = {"PYTHONPATH": os.pathsep.join([str(REPO_DIR), str(TESTS_DIR)])}


@pytest.fixture(scope="module")
def repickled(tmp_path_factory):
    """name -> (bytes pickled in process A, bytes re-pickled after loading in process B).

    A builds other models first, as a real program would, so its auto-generated
    names are not the ones a fresh process would pick. The two processes get
    different hash seeds.
    """
    directory = tmp_path_factory.mktemp("repickled")
    run_python(
        f"""
        import pickle, keras_pickle, zoo
        keras_pickle.install()
        zoo.sequential()
        for name in {CROSS_PROCESS_NAMES!r}:
            with open({str(directory)!r} + f"/{{name}}.a.pkl", "wb") as f:
                f.write(pickle.dumps(zoo.trained(zoo.BUILDERS[name])))
        """,
        env={**CROSS_PROCESS_ENV, "PYTHONHASHSEED": "1"},
    )
    run_python(
        f"""
        import pickle, keras_pickle, zoo
        for name in {CROSS_PROCESS_NAMES!r}:
            with open({str(directory)!r} + f"/{{name}}.a.pkl", "rb") as f:
                model = keras_pickle.loads(f.read())
            with open({str(directory)!r} + f"/{{name}}.b.pkl", "wb") as f:
                f.write(pickle.dumps(model))
        """,
        env={**CROSS_PROCESS_ENV, "PYTHONHASHSEED": "2"},
    )
    read = lambda suffix, name: (directory / f"{name}.{suffix}.pkl").read_bytes()  # noqa: E731
    return {name: (read("a", name), read("b", name)) for name in CROSS_PROCESS_NAMES}


def canonical_config(config):
    """The config without what differs between equivalent objects: object ids.

    ``shared_object_id`` is ``id()`` of an object serialized twice; a
    DTypePolicy is shared by the layers that use the global policy, but not
    after a reload.
    """
    ids: dict = {}

    def walk(node):
        if isinstance(node, dict):
            node = dict(node)
            if "shared_object_id" in node:
                if node.get("class_name") == "DTypePolicy":
                    del node["shared_object_id"]
                else:
                    node["shared_object_id"] = ids.setdefault(node["shared_object_id"], len(ids))
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node

    return walk(config)


def content(data: bytes) -> dict:
    """What a payload says, read by the inspector's stack machine, minus its representation."""
    (payload,) = _evaluate(data, "payload").payloads
    header, body = payload.args

    def entries(section):
        return [(dtype, shape, bytes(raw)) for _key, dtype, shape, raw in section]

    return {
        "header": header,
        "config": canonical_config(json.loads(body["config"])),
        "variables": entries(body["variables"]),
        "optimizer_variables": entries(body["optimizer_variables"]),
        "optimizer_built": body["optimizer_built"],
        "layer_states": [(i, entries(own), assets) for i, own, assets in body["layer_states"]],
        "custom_objects": {
            key: (value.module, value.name) if isinstance(value, Global) else repr(value)
            for key, value in body["custom_objects"].items()
        },
    }


def test_repickled_in_another_process_says_the_same(repickled):
    """Same header, config (ids aside), weights, optimizer state and custom objects."""
    for name, (first, second) in repickled.items():
        a, b = content(first), content(second)
        for key in a:
            assert a[key] == b[key], f"{name}: {key} differs"


def first_difference(a: bytes, b: bytes) -> str:
    import pickletools

    ops_a = list(pickletools.genops(a))
    ops_b = list(pickletools.genops(b))
    for (op_a, arg_a, pos), (op_b, arg_b, _) in zip(ops_a, ops_b):
        if (op_a.name, arg_a) != (op_b.name, arg_b) and op_a.name != "FRAME":
            return f"at byte {pos}: {op_a.name} {str(arg_a)[:120]!r} vs {op_b.name} {str(arg_b)[:120]!r}"
    return f"lengths {len(a)} vs {len(b)}"


class BytesDiffer(Exception):
    pass


@pytest.mark.xfail(
    raises=BytesDiffer,
    strict=True,
    reason="Byte-identity across processes needs changes outside keras_pickle's format layer: "
    "(1) _rebuild: drop/renumber shared_object_id (an id()) in the config; "
    "(2) _state/_payload: variable keys without auto-generated, history-dependent names "
    "(dense_3, seed_generator_2, nested-model path prefixes, optimizer slot names).",
)
def test_repickled_in_another_process_gives_identical_bytes(repickled):
    differences = {name: first_difference(a, b) for name, (a, b) in repickled.items() if a != b}
    if differences:
        raise BytesDiffer(differences)


# --------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_eight_threads_pickling_the_same_model_get_identical_bytes(models):
    model = models["functional"]
    expected = {"pickle": pickle.dumps(model), "checksum": keras_pickle.dumps(model, checksum=True)}
    barrier = threading.Barrier(8)

    def work(_index):
        barrier.wait()
        return [(pickle.dumps(model), keras_pickle.dumps(model, checksum=True)) for _ in range(3)]

    with ThreadPoolExecutor(8) as pool:
        results = [pair for pairs in pool.map(work, range(8)) for pair in pairs]
    assert len(results) == 24
    for plain, checksummed in results:
        assert plain == expected["pickle"] and checksummed == expected["checksum"]
    assert_same_state(model, keras_pickle.loads(results[-1][1]))


@pytest.mark.timeout(120)
def test_pickling_while_another_thread_predicts(models):
    model = models["functional"]
    x = zoo.data(64, seed=3)[0]
    reference = model.predict(x, verbose=0)
    expected = pickle.dumps(model)
    started, stop = threading.Event(), threading.Event()
    predictions, errors = [], []

    def predict_until_stopped():
        try:
            while not stop.is_set():
                predictions.append(model.predict(x, verbose=0))
                started.set()
        except BaseException as e:  # reported below
            errors.append(e)
            started.set()

    thread = threading.Thread(target=predict_until_stopped)
    thread.start()
    try:
        assert started.wait(60)
        dumps = []
        while len(dumps) < 20 or len(predictions) < 3:
            dumps.append(pickle.dumps(model))
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert all(d == expected for d in dumps)
    assert all(np.array_equal(p, reference) for p in predictions)
    assert_same_state(model, pickle.loads(dumps[-1]))
