"""Structure-aware fuzzing: mutate the configs and custom-object tables of real payloads, not bytes.

Each input edits a real model's payload the way tests/redteam.py does (a value anywhere in the
config replaced by a class or function reference, a custom-object name or junk; entries of the
custom-object table pointed at globals from a pool of allowed, refused and traversing names),
signs it again and loads it in safe mode. Whatever happens must be a ``KerasPickleError`` or a
load, with no command run, no module imported and no Keras global changed; and whatever the
inspector says safe mode refuses, safe mode refuses.

The budget is fixed and derandomized like tests/safe_mode/test_fuzz.py's; ``KERAS_PICKLE_FUZZ_EXAMPLES``
raises it.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import keras
import pytest
import redteam
import zoo
from helpers import cpu_time_limit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redteam import Effects, GlobalRef, keras_globals
from test_fuzz import BUDGET, LONG_SESSION

import keras_pickle

OUTCOMES: collections.Counter = collections.Counter()

pytestmark = pytest.mark.backends

MARKER = Path("/tmp/keras_pickle_fuzz_structure_marker")
TOUCH = f"touch {MARKER}"

# Globals a custom-object table may point at: allowed user objects, refused Keras classes and
# functions, traversals through modules, standard-library callables.
POOL = [
    GlobalRef("zoo", "Scale"),
    GlobalRef("zoo", "scaled_relu"),
    GlobalRef("zoo", "custom_mse"),
    GlobalRef("zoo", "CustomMSE"),
    GlobalRef("keras.src.layers.core.lambda_layer", "Lambda"),
    GlobalRef("keras.src.layers.core.dense", "Dense"),
    GlobalRef("keras.src.utils.io_utils", "print_msg"),
    GlobalRef("keras.src.saving.serialization_lib", "enable_unsafe_deserialization"),
    GlobalRef("keras.src.backend.config", "set_floatx"),
    GlobalRef("keras.src.activations.activations", "relu"),
    GlobalRef("keras_pickle._safe_mode.resolution", "inspect.os.spawnv"),
    GlobalRef("keras_pickle._reader.unpickler", "pickle._loads"),
    GlobalRef("numpy", "save"),
    GlobalRef("os", "system"),
    GlobalRef("zoo", "np.load"),
]
NAMES = ["Foo", "Scale", "Dense", "Lambda", "layers.Lambda", "relu", "spawnv", "print_msg", "function", "x"]
MODULES = ["evil", "keras", "keras.layers", "keras.config", "builtins", "zoo", "__main__", None]

reference = st.fixed_dictionaries(
    {
        "module": st.sampled_from(MODULES),
        "class_name": st.sampled_from(NAMES),
        "config": st.one_of(
            st.sampled_from(NAMES),
            st.just(redteam.lambda_layer_config("x", "spawnv", {"file": "/bin/sh", "args": ["sh", "-c", TOUCH]})),
            st.fixed_dictionaries({"name": st.just("x"), "units": st.integers(-3, 3)}),
        ),
        "registered_name": st.sampled_from([*NAMES, None]),
    }
)
replacement = st.one_of(
    reference,
    st.sampled_from(NAMES),
    st.integers(-(1 << 70), 1 << 70),
    st.none(),
    st.lists(st.integers(), max_size=3),
)
table_edit = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(POOL), max_size=4)


def nodes(config) -> list[tuple[dict | list, object]]:
    """Every (container, key) place of the config a value can be replaced at."""
    found, stack = [], [config]
    while stack:
        item = stack.pop()
        places = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, value in places:
            found.append((item, key))
            stack.append(value)
    return found


@pytest.fixture(scope="module")
def parts():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), zoo.Scale(2.0), keras.layers.Dense(2, activation=zoo.scaled_relu)])
    model.compile(optimizer="adam", loss=zoo.custom_mse)
    return redteam.payload_parts(model)


@pytest.mark.timeout(600)
@settings(
    max_examples=max(BUDGET // 5, 50),
    deadline=None,
    derandomize=not LONG_SESSION,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    picks=st.lists(st.tuples(st.integers(0, 1 << 16), replacement), max_size=3),
    table=table_edit,
    keep_table=st.booleans(),
)
def test_config_and_custom_object_mutations_are_refused_or_harmless(parts, picks, table, keep_table):
    header, body = parts
    config = json.loads(body["config"])
    for position, value in picks:
        places = nodes(config)
        container, key = places[position % len(places)]
        container[key] = value
    custom = {**(body["custom_objects"] if keep_table else {}), **table}
    data = redteam.craft(header, {**body, "config": json.dumps(config), "custom_objects": custom})
    MARKER.unlink(missing_ok=True)
    report_refuses = keras_pickle.inspect(data).safe_mode_refuses
    loaded = False
    with Effects(MARKER) as effects:
        try:
            with cpu_time_limit():
                keras_pickle.loads(data)
            loaded = True
            OUTCOMES["loaded"] += 1
        except keras_pickle.KerasPickleError as e:
            OUTCOMES[type(e).__name__] += 1
    assert not MARKER.exists(), "a command ran"
    events = [e for e in effects.events if e.startswith(("os.", "subprocess.", "socket.", "shutil.", "ctypes."))]
    assert not events, events
    settings_now = {k: v for k, v in keras_globals().items() if not k.endswith("_random")}
    assert settings_now == {k: v for k, v in effects.settings.items() if not k.endswith("_random")}
    if report_refuses:
        assert not loaded, "the inspector says safe mode refuses this payload, and it loaded"


def test_the_mutations_reach_past_the_first_checks():
    """Run after the fuzz test (file order): the inputs it tried were refused for several reasons, and some loaded."""
    print("\nstructure-aware outcomes:", dict(OUTCOMES))
    assert OUTCOMES["loaded"] > 0 and OUTCOMES["UnsafePayloadError"] > 0 and len(OUTCOMES) >= 3, dict(OUTCOMES)
