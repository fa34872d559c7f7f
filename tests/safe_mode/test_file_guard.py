"""Safe mode's guard on the file system (keras_pickle._safe_mode.opens): while a payload is rebuilt, no
audited event touches a path its configs name, whatever the field, the layer or the depth.

The layer here is one the loading process registered (so safe mode allows it) and that opens a field of its
config no rule knows: the class of attack :data:`~keras_pickle._safe_mode.rules.FILE_FIELDS` cannot close.
"""

from __future__ import annotations

import gc
import linecache
import os
import sys
import tempfile
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import redteam
from helpers import assert_same_state

import keras_pickle
from keras_pickle._safe_mode import opens

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

TESTS_DIR = Path(__file__).resolve().parent
TOUCHED: list[str] = []
"""What the layer's file access did, in order: a refused access leaves no entry."""


@keras.saving.register_keras_serializable(package="file_guard")
class NotesLayer(keras.layers.Layer):
    """Scales its input; reads, writes or lists what its config names when asked to (as a layer of
    someone else's may), swallowing any error unless ``strict``."""

    def __init__(self, source=None, folder=None, name_in_folder=None, action="read", strict=True, **kwargs):
        super().__init__(**kwargs)
        self.source, self.folder, self.name_in_folder, self.action, self.strict = (
            source,
            folder,
            name_in_folder,
            action,
            strict,
        )
        target = os.path.join(folder, name_in_folder) if folder and name_in_folder else source
        if target is not None:
            try:
                self._touch(target)
            except Exception:
                if strict:
                    raise

    def _touch(self, target: str) -> None:
        if self.action == "read":
            with open(os.path.expanduser(target)) as f:
                TOUCHED.append(f.read())
        elif self.action == "write":
            with open(target, "w") as f:
                f.write("overwritten")
            TOUCHED.append("written")
        elif self.action == "list":
            TOUCHED.append(",".join(sorted(os.listdir(target))))
        elif self.action == "warn":
            warnings.warn(f"notes at {target}", UserWarning, stacklevel=1)
            TOUCHED.append("warned")

    def call(self, x):
        return keras.ops.cast(x, self.compute_dtype) * 2.0

    def get_config(self):
        fields = ("source", "folder", "name_in_folder", "action", "strict")
        return {**super().get_config(), **{field: getattr(self, field) for field in fields}}


@pytest.fixture(autouse=True)
def _fresh_record():
    TOUCHED.clear()
    yield
    TOUCHED.clear()


def notes_payload(nest: bool = False, **fields) -> bytes:
    """A model whose NotesLayer touched nothing when written, its config then given ``fields``."""
    layer = NotesLayer(name="notes")
    inner = keras.Sequential([layer], name="inner") if nest else layer
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense"), inner])
    header, body = redteam.payload_parts(model)

    def edit(config):
        entry = redteam.layer_configs(config)[-1]
        if nest:
            entry = entry["config"]["layers"][-1]
        entry["config"].update(fields)

    return redteam.craft(header, redteam.edit_config(body, edit))


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text("root:x:0:0")
    return path


def assert_refused_at_load(data: bytes, what: str) -> keras_pickle.UnsafePayloadError:
    with pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data)
    assert TOUCHED == [], "the layer touched what the payload named"
    assert what in str(info.value) and "safe_mode=False" in str(info.value)
    return info.value


@pytest.mark.parametrize("nest", [False, True], ids=["top", "nested Sequential"])
def test_a_layer_reading_a_path_its_config_names_is_refused_at_any_depth(secret, nest):
    assert_refused_at_load(notes_payload(nest, source=str(secret)), "secret.txt")


def test_the_refusal_stands_when_the_layer_swallows_it(secret):
    error = assert_refused_at_load(notes_payload(source=str(secret), strict=False), "secret.txt")
    assert error.what.startswith("open ")


def test_a_path_joined_from_two_fields_is_refused(secret):
    assert_refused_at_load(notes_payload(folder=str(secret.parent), name_in_folder=secret.name), "secret.txt")


def test_relative_and_home_spellings_are_refused(secret, monkeypatch):
    monkeypatch.chdir(secret.parent)
    assert_refused_at_load(notes_payload(source="secret.txt"), "secret.txt")
    monkeypatch.setenv("HOME", str(secret.parent))
    assert_refused_at_load(notes_payload(source="~/secret.txt"), "secret.txt")


def test_writing_or_listing_a_named_path_is_refused(secret):
    assert_refused_at_load(notes_payload(source=str(secret), action="write"), "secret.txt")
    assert secret.read_text() == "root:x:0:0"
    assert_refused_at_load(notes_payload(source=str(secret.parent), action="list"), secret.parent.name)


def test_the_refusals_advice_loads_it_and_the_guard_ends_with_the_load(secret):
    data = notes_payload(source=str(secret))
    assert_refused_at_load(data, "secret.txt")
    assert secret.read_text() == "root:x:0:0"  # nothing is guarded outside a load
    loaded = keras_pickle.loads(data, safe_mode=False)  # the refusal's advice, followed
    assert TOUCHED == ["root:x:0:0"]
    x = np.ones((2, 3), "float32")
    assert np.array_equal(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(loaded(x)))


def test_a_plain_string_that_names_no_opened_path_loads_bit_exact():
    """A config string equal to a word, the working directory or the root is not taken for a path."""
    layer = NotesLayer(name="notes")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense"), layer])
    model.build((None, 3))
    data = keras_pickle.dumps(model)
    for value in ("relu", ".", "/", os.getcwd()):
        header, body = redteam.payload_parts(model)

        def edit(config, value=value):
            redteam.layer_configs(config)[-1]["config"]["name_in_folder"] = value

        loaded = keras_pickle.loads(redteam.craft(header, redteam.edit_config(body, edit)))
        assert loaded.layers[-1].name_in_folder == value
        assert_same_state(model, loaded)
    assert_same_state(model, keras_pickle.loads(data))


def test_the_import_system_linecache_and_asset_directories_are_not_accesses(capsys):
    """A named directory may hold what the rebuild reads on its own: a warning's source line (shown through
    linecache) and the payload's assets (written to keras_pickle's own temporary directory)."""
    linecache.clearcache()
    lookup = keras.layers.StringLookup(name="lookup")
    lookup.adapt(["a", "b", "b"])  # an adapted vocabulary travels as an asset
    model = keras.Sequential([keras.Input((1,), dtype="string"), lookup])
    header, body = redteam.payload_parts(model)
    notes = {"folder": str(TESTS_DIR), "name_in_folder": tempfile.gettempdir(), "action": "warn"}
    notes_layer = {
        "module": NotesLayer.__module__,
        "class_name": "NotesLayer",
        "registered_name": "file_guard>NotesLayer",
        "config": {"name": "notes", "trainable": True, "dtype": "float32", **notes},
    }

    def edit(config):
        config["config"]["layers"].append(notes_layer)

    def show(message, category, filename, lineno, file=None, line=None):  # as Python shows one: with its line
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        loaded = keras_pickle.loads(redteam.craft(header, redteam.edit_config(body, edit)))
    assert TOUCHED == ["warned"] and 'warnings.warn(f"notes at' in capsys.readouterr().err
    assert loaded.layers[0].get_vocabulary() == lookup.get_vocabulary()


def checking_work(named: list[str], events: list[tuple[str, tuple]]) -> int:
    """The Python and C calls the guard makes checking ``events`` while a payload naming ``named`` is rebuilt
    (counted by :func:`sys.setprofile`; Python runs audit hooks unprofiled, so they are called here as it
    calls them). A first round, which indexes the strings and fills Python's caches, is not counted."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += 1

    with opens.never_touching([{"labels": named}]):
        for event, args in events:
            opens._audit(event, args)
        collecting = gc.isenabled()
        gc.disable()  # no collector callback is counted
        sys.setprofile(count)
        try:
            for event, args in events:
                opens._audit(event, args)
        finally:
            sys.setprofile(None)
            if collecting:
                gc.enable()
    return calls


def test_checking_an_event_does_the_same_work_however_many_strings_the_payload_names(tmp_path):
    """A scan of every named string per event made a payload of many strings hang its load: the work is
    counted, not timed, with 10 strings and with 10,000 (files and directories beside the events' paths,
    absolute and relative), and the same events are refused once one string names their directory."""
    folder = tmp_path / "data"
    folder.mkdir()
    path = str(folder / "part-0.csv")
    events = [("open", (path, "r", 0)), ("os.listdir", (str(folder),)), ("os.rename", (path, path + ".tmp", -1, -1))]
    kinds = (f"{tmp_path}/other-{{}}", f"{folder}/part-0.csv.{{}}", "shard-{}/labels.txt", "~/vocab-{}.txt")
    named = {n: [kinds[i % len(kinds)].format(i) for i in range(n)] for n in (10, 10_000)}
    assert checking_work(named[10_000], events) == checking_work(named[10], events)
    for event, args in events:
        with pytest.raises(keras_pickle.UnsafePayloadError, match="data"):
            checking_work([*named[10_000], str(folder)], [(event, args)])
