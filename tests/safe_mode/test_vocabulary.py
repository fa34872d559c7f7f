"""Safe mode's vocabulary against the installed Keras, KerasHub and tf-keras (keras_pickle/_safe_mode/tables.py).

The committed tables are what ``tests/safe_mode/make_vocabulary.py`` writes from the versions they name:
regenerated here, they must be identical, and every public symbol must be mentioned. Under other versions
(a newer Keras on a fresh machine), what the tables do not mention is reported, and must be refused.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import keras
import keras_hub
import pytest

from keras_pickle._safe_mode import tables
from keras_pickle._wire import dialect_traits

HERE = Path(__file__).resolve().parent
PACKAGES = {"keras3": ("keras", "keras_hub"), "tf_keras": ("tf_keras",)}


def installed_versions(dialect: str) -> dict[str, str]:
    return {name: importlib.metadata.version(name.replace("_", "-")) for name in PACKAGES[dialect]}


def public_symbols(package: types.ModuleType) -> dict[str, object]:
    sys.path.insert(0, str(HERE))
    try:
        from make_vocabulary import public_symbols as listed
    finally:
        sys.path.remove(str(HERE))
    return listed(package)


def unmentioned(dialect: str, modules: list[types.ModuleType]) -> list[str]:
    table = tables.vocabulary(dialect)
    missing = []
    for module in modules:
        for name, value in public_symbols(module).items():
            path = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
            if name not in table.public and name not in table.entries and path not in table.entries:
                missing.append(name)
    return missing


@pytest.mark.parametrize("dialect", ["keras3", pytest.param("tf_keras", marks=pytest.mark.tf_keras)])
def test_every_public_symbol_is_mentioned_or_refused(dialect):
    modules = [keras, keras_hub] if dialect == "keras3" else [pytest.importorskip("tf_keras")]
    missing = unmentioned(dialect, modules)
    if installed_versions(dialect) == tables.vocabulary(dialect).generated_from:
        assert missing == [], f"public symbols the {dialect} vocabulary does not mention: {missing[:30]}"
        return
    print(f"{len(missing)} public symbols of {installed_versions(dialect)} the tables do not mention: {missing[:50]}")
    for name in missing:  # closed by default: a newer Keras's additions are refused until listed
        value = public_symbols_by_name(modules, name)
        path = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        assert tables.table_refusal(path, tables.KERAS_ROLE) is not None, path


def public_symbols_by_name(modules, name):
    for module in modules:
        found = public_symbols(module).get(name)
        if found is not None:
            return found
    return None


@pytest.mark.tf_keras
def test_the_generator_writes_the_committed_tables(tmp_path):
    """Regenerated from the installed packages, the tables are byte for byte the committed ones (where the
    versions are the ones they were generated from)."""
    for dialect in PACKAGES:
        if installed_versions(dialect) != tables.vocabulary(dialect).generated_from:
            pytest.skip(f"{dialect}: installed {installed_versions(dialect)}, the tables name other versions")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, str(HERE / "make_vocabulary.py"), str(tmp_path)], check=True, env=env,
                   capture_output=True, timeout=600)  # fmt: skip
    committed = Path(tables.__file__).with_name("vocabulary")
    for name in (traits.vocabulary for traits in dialect_traits.BY_NAME.values()):
        assert json.loads((tmp_path / name).read_text()) == json.loads((committed / name).read_text()), name


def test_every_entry_has_a_role_or_a_stated_reason():
    for dialect in dialect_traits.BY_NAME:
        table = tables.vocabulary(dialect)
        roles = set(table.entries.values())
        reasons = {role.partition(":")[2] for role in roles if role.startswith("refused:")}
        assert reasons <= set(table.reasons), reasons - set(table.reasons)
        assert roles - {f"refused:{reason}" for reason in reasons} <= {
            "build", "op", "control_flow", "callback", "record", tables.TENSOR
        }  # fmt: skip
        assert all(path in table.entries for path in table.public.values())


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("keras.src.layers.core.dense.Dense", None),
        ("keras.src.ops.numpy.Add", None),
        ("keras.src.ops.core.Switch", "allow_control_flow=True"),
        ("keras.src.layers.core.lambda_layer.Lambda", "runs the Python code"),
        ("keras.src.utils.progbar.Progbar", "does not build from a config"),
        ("keras.src.utils.file_utils.get_file", "not a computation on tensors"),
        ("keras_hub.src.tokenizers.word_piece_tokenizer_trainer.compute_word_piece_vocabulary", "KerasHub registers"),
        ("keras.src.ops.core.switch", "calls a function its arguments name"),
        ("keras.src.layers.core.dense.NotInKeras", "does not list it"),
    ],
)
def test_the_tables_decide_by_defining_path(path, expected):
    reason = tables.table_refusal(path, tables.KERAS_ROLE)
    assert (reason is None) if expected is None else (expected in reason), reason


def test_only_tensor_functions_stand_where_the_payload_chooses_arguments():
    assert tables.table_refusal("keras.src.activations.activations.relu", tables.ARGUMENT_ROLE) is None
    assert tables.table_refusal("keras.src.ops.numpy.add", tables.ARGUMENT_ROLE) is None
    for path in ("keras.src.layers.core.dense.Dense", "keras.src.ops.numpy.Add"):
        assert "chooses the arguments" in tables.table_refusal(path, tables.ARGUMENT_ROLE)
