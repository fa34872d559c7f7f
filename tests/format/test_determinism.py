"""Determinism and concurrency: the same model pickles to the same bytes."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import zoo
from helpers import REPO_DIR, TESTS_DIR, assert_same_state, run_python
from keras.src.saving import serialization_lib

import keras_pickle
from keras_pickle._inspect.machine import evaluate
from keras_pickle._inspect.opening import opened
from keras_pickle._inspect.values import Global
from keras_pickle._keras3 import survey as _survey

NAMES = ["functional", "subclassed"]
# Builders in zoo. Between them: a nested Sequential, auto-named sublayers, seed
# generators, a registered layer and a registered subclassed model (two lookup
# keys each), and objects shared between layers.
CROSS_PROCESS_NAMES = ["functional", "registered_subclassed", "shared_objects"]


@pytest.fixture(scope="module")
def models():
    return {name: zoo.trained(zoo.BUILDERS[name]) for name in NAMES}


def test_two_dumps_give_identical_bytes(models):
    for name, model in models.items():
        for protocol in (0, 2, 5):
            assert pickle.dumps(model, protocol=protocol) == pickle.dumps(model, protocol=protocol), name
        assert keras_pickle.dumps(model, checksum=True) == keras_pickle.dumps(model, checksum=True), name
        # In band keras_pickle.dumps writes a checksum by default; plain pickle at protocol 5 none (it may be
        # out of band): without it, the two write the same bytes.
        assert keras_pickle.dumps(model) == keras_pickle.dumps(model, checksum=True), name
        assert keras_pickle.dumps(model, checksum=False) == pickle.dumps(model, protocol=5), name
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
                f.write(pickle.dumps(zoo.trained(getattr(zoo, name))))
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


def inspected_payload(data: bytes):
    """The payload's restore call, read by the inspector's stack machine (nothing runs), data held."""
    with opened(data) as pickle_input:
        (payload,) = evaluate(pickle_input, hold_data=True).payloads
    return payload


def content(data: bytes) -> dict:
    """What a payload says, read by the inspector's stack machine, minus its representation."""
    payload = inspected_payload(data)
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


def test_repickled_in_another_process_gives_identical_bytes(repickled):
    differences = {name: first_difference(a, b) for name, (a, b) in repickled.items() if a != b}
    assert not differences, differences


# --------------------------------------------------------------------------
# Canonical forms: object-sharing ids and variable keys
# --------------------------------------------------------------------------


def body_of(data: bytes) -> dict:
    """The payload body, read by the inspector (nothing runs)."""
    return inspected_payload(data).args[1]


def shared_ids(config_text: str) -> list[int]:
    """Every shared_object_id in the order the JSON text holds them."""
    return [int(i) for i in re.findall(r'"shared_object_id": (\d+)', config_text)]


@pytest.mark.parametrize("name", sorted(zoo.BUILDERS) + ["shared_objects"])
def test_repickled_in_the_same_process_gives_identical_bytes(name):
    """Loading creates new auto-numbered names (sublayers, seed generators); the bytes stay the same."""
    model = zoo.trained(getattr(zoo, name))
    data = pickle.dumps(model)
    restored = pickle.loads(data)
    assert [v.path for v in restored.variables] != [v.path for v in model.variables]
    assert pickle.dumps(restored) == data, first_difference(data, pickle.dumps(restored))


def test_a_layer_shared_through_configs_is_marked_everywhere_and_shared_again():
    model = zoo.shared_objects()
    with serialization_lib.ObjectSharingScope():
        by_keras = serialization_lib.serialize_keras_object(model)
    # Keras marks the tied Dense on its 2nd and 3rd occurrence only; keras_pickle marks all three.
    assert [object_id for _path, object_id in _survey._shared_marks(by_keras)] == [id(model.layers[1].inner)] * 2
    config_text = body_of(pickle.dumps(model))["config"]
    assert shared_ids(config_text) == [1, 1, 1]
    stateless = [
        node
        for node in iter_dicts(json.loads(config_text))
        if node.get("class_name") in ("DTypePolicy", "RandomNormal", "L2")
    ]
    assert len(stateless) > 3 and not any("shared_object_id" in node for node in stateless)

    restored = pickle.loads(pickle.dumps(model))
    inner = [layer.inner for layer in restored.layers if isinstance(layer, zoo.Reuse)]
    assert len(inner) == 3 and inner[0] is inner[1] is inner[2]
    assert len(restored.variables) == len(model.variables)
    assert_same_state(model, restored)


def iter_dicts(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from iter_dicts(value)
    elif isinstance(node, list):
        for value in node:
            yield from iter_dicts(value)


def reference(module: str, class_name: str, object_id: int) -> dict:
    """A serialized object as Keras writes it when it is shared."""
    return {
        "module": module,
        "class_name": class_name,
        "config": {},
        "registered_name": None,
        "shared_object_id": object_id,
    }


def test_canonical_config_keeps_equal_ids_equal_and_distinct_ids_distinct():
    config = {
        "layers": [
            {"dtype": reference("keras", "DTypePolicy", 5), "a": reference("keras.layers", "Dense", 900)},
            {"r": reference("keras.regularizers", "L2", 6), "b": [reference("my.module", "Custom", 77)]},
            {"a": reference("keras.layers", "Dense", 900), "c": (reference("my.module", "Custom", 5),)},
            {"q": reference("keras.dtype_policies", "QuantizedDTypePolicy", 8), "b": reference("my.module", "C", 77)},
        ]
    }
    original = copy.deepcopy(config)
    canonical = _survey.canonical_config(config)
    assert config == original, "the input must not change"
    layers = canonical["layers"]
    for stateless in (layers[0]["dtype"], layers[1]["r"], layers[3]["q"]):
        assert "shared_object_id" not in stateless
    assert [layers[0]["a"]["shared_object_id"], layers[1]["b"][0]["shared_object_id"]] == [1, 2]
    assert layers[2]["a"]["shared_object_id"] == 1 and layers[3]["b"]["shared_object_id"] == 2
    assert layers[2]["c"][0]["shared_object_id"] == 3  # id 5, as the dropped policy had: still its own
    assert _survey.canonical_config(canonical) == canonical


def keys_of(data: bytes) -> tuple[list[str], list[str]]:
    body = body_of(data)
    return [e[0] for e in body["variables"]], [e[0] for e in body["optimizer_variables"]]


def test_variable_keys_name_places_in_the_model_not_process_history():
    first = zoo.trained(zoo.subclassed)
    zoo.functional(), zoo.sequential()  # advance Keras's name counters
    second = zoo.trained(zoo.subclassed)
    assert [v.path for v in first.variables] != [v.path for v in second.variables]
    assert keys_of(pickle.dumps(first)) == keys_of(pickle.dumps(second))

    keys, optimizer_keys = keys_of(pickle.dumps(first))
    assert len(keys) == len(first.variables) and len(optimizer_keys) == len(first.optimizer.variables)
    # Tower's attributes (block, head, shared, out), then the sublayers' attributes or names.
    assert {key.split("/")[0] for key in keys} == {"block", "head", "shared", "out"}
    assert "block/dropout/seed_generator_state" in keys and "head/scale/w" in keys
    slots = [key for key in optimizer_keys if key not in ("iteration", "learning_rate")]
    assert len(slots) == 2 * len(first.trainable_variables)
    for key in slots:
        reference_key, _, slot = key.rpartition("/")
        assert reference_key in keys and slot in ("momentum", "velocity"), key


class ForgetfulScale(keras.layers.Layer):
    """A layer whose get_config omits ``units``, which decides its weight's shape."""

    def __init__(self, units: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(self.units,), name="w")

    def call(self, x):
        return x[..., : self.units] * self.w

    def get_config(self):
        return super().get_config()


def test_a_mismatch_on_load_names_the_variable_by_key_and_rebuilt_path():
    model = keras.Sequential([keras.Input((zoo.FEATURES,)), zoo.Scale(), ForgetfulScale(3, name="forgetful")])
    with pytest.raises(keras_pickle.StateMismatchError) as info:
        pickle.loads(pickle.dumps(model))
    message = str(info.value)
    assert "Variable #1 'forgetful/w'" in message and "(3,) in the payload but (2,)" in message
    assert re.search(r"in the object rebuilt from its config \('[\w/]*forgetful/w'\)", message), message


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
