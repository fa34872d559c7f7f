"""KerasHub backbones and tasks built from constructor arguments (tiny sizes, no preset downloads).

Backbones, a text classifier and a causal LM with their preprocessors and
tokenizers built from in-memory vocabularies: pickled, deep-copied and loaded
in a fresh process, every variable and the tokenizer assets included, fresh
and after use (a preprocessor builds parts of itself on first use).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
from helpers import TESTS_DIR, run_python

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402

TEXT = ["the quick fox", "the brown fox jumps"]
WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "fox", "brown", "jump", "##s"]
CHARS = sorted(set("".join(TEXT).replace(" ", "")))
BPE_VOCABULARY = {"<|endoftext|>": 0, "Ġ": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
BPE_VOCABULARY["th"] = len(BPE_VOCABULARY)
BPE_MERGES = ["t h"]


def bert_classifier():
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=WORDPIECE)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer=tokenizer, sequence_length=8)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(WORDPIECE), num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    )  # fmt: skip
    return keras_hub.models.BertTextClassifier(backbone=backbone, preprocessor=preprocessor, num_classes=2)


def gpt2_causal_lm():
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=BPE_VOCABULARY, merges=BPE_MERGES)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer=tokenizer, sequence_length=8)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(BPE_VOCABULARY), num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    )  # fmt: skip
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=preprocessor)


BACKBONES = {
    "bert": lambda: keras_hub.models.BertBackbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8
    ),
    "gpt2": lambda: keras_hub.models.GPT2Backbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8
    ),
    "gemma": lambda: keras_hub.models.GemmaBackbone(
        vocabulary_size=20,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
        head_dim=4,
    ),  # fmt: skip
    "llama": lambda: keras_hub.models.LlamaBackbone(
        vocabulary_size=20,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
    ),  # fmt: skip
    "vit": lambda: keras_hub.models.ViTBackbone(
        image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
    ),
}


def every_value(model) -> list[bytes]:
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None:
        variables += list(model.optimizer.variables)
    return [keras.ops.convert_to_numpy(v).tobytes() for v in variables]


def backbone_input(name: str, backbone):
    if name == "vit":
        return np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    ids = np.random.default_rng(0).integers(1, 20, size=(2, 8)).astype("int32")
    mask = np.ones((2, 8), "int32")
    if name == "bert":
        return {"token_ids": ids, "segment_ids": np.zeros((2, 8), "int32"), "padding_mask": mask}
    return {"token_ids": ids, "padding_mask": mask}


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbones_round_trip_bit_exact(name):
    backbone = BACKBONES[name]()
    x = backbone_input(name, backbone)
    expected = keras.tree.map_structure(keras.ops.convert_to_numpy, backbone(x))
    for restored in (pickle.loads(pickle.dumps(backbone)), copy.deepcopy(backbone)):
        assert type(restored) is type(backbone)
        assert every_value(restored) == every_value(backbone)
        actual = keras.tree.map_structure(keras.ops.convert_to_numpy, restored(x))
        assert all(np.array_equal(a, b) for a, b in zip(keras.tree.flatten(expected), keras.tree.flatten(actual)))


def used(task):
    """After fit (classifier) or predict (causal LM): the preprocessor has built what it builds on first use."""
    if isinstance(task, keras_hub.models.TextClassifier):
        task.fit(x=TEXT, y=np.array([0, 1]), batch_size=2, epochs=1, verbose=0)
    else:
        task.fit(x=TEXT, batch_size=2, epochs=1, verbose=0)
    return task


TASKS = {"bert_classifier": bert_classifier, "gpt2_causal_lm": gpt2_causal_lm}


@pytest.mark.parametrize("after_use", [False, True], ids=["fresh", "used"])
@pytest.mark.parametrize("name", sorted(TASKS))
def test_tasks_with_tokenizers_pickle_and_deep_copy_compiled_as_they_were(name, after_use):
    task = TASKS[name]()
    if after_use:
        used(task)
    expected = task.predict(TEXT, verbose=0)
    for make in (lambda: pickle.loads(pickle.dumps(task)), lambda: copy.deepcopy(task)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no "compile() was not called" warning
            restored = make()
        assert every_value(restored) == every_value(task)
        assert restored.compiled and type(restored.optimizer) is type(task.optimizer)
        assert restored.preprocessor.tokenizer.get_vocabulary() == task.preprocessor.tokenizer.get_vocabulary()
        assert np.array_equal(restored.predict(TEXT, verbose=0), expected)


def test_a_causal_lm_compiled_with_a_sampler_object_keeps_it():
    task = gpt2_causal_lm()
    task.compile(sampler=keras_hub.samplers.TopKSampler(k=2, seed=3))
    for restored in (pickle.loads(pickle.dumps(task)), copy.deepcopy(task)):
        assert type(restored.sampler) is keras_hub.samplers.TopKSampler and restored.sampler.k == 2
        assert every_value(restored) == every_value(task)


FRESH = """
    import pickle, sys
    import numpy as np
    data = open(sys.argv[1], "rb").read()
    expected = np.load(sys.argv[2])
    task = pickle.loads(data)
    import keras
    values = [keras.ops.convert_to_numpy(v).tobytes() for v in list(task.variables) + list(task.optimizer.variables)]
    assert len(values) == len(expected.files) - 1
    for i, raw in enumerate(values):
        assert raw == expected[f"v{i}"].tobytes(), i
    assert np.array_equal(task.predict(["the quick fox", "the brown fox jumps"], verbose=0), expected["predictions"])
    print("fresh ok", type(task).__name__)
"""


def test_a_used_causal_lm_loads_in_a_fresh_interpreter_with_its_tokenizer(tmp_path):
    task = used(gpt2_causal_lm())
    (tmp_path / "task.pkl").write_bytes(pickle.dumps(task))
    arrays = {f"v{i}": np.frombuffer(raw, np.uint8) for i, raw in enumerate(every_value(task))}
    np.savez(tmp_path / "expected.npz", predictions=task.predict(TEXT, verbose=0), **arrays)
    out = run_python(FRESH, str(tmp_path / "task.pkl"), str(tmp_path / "expected.npz"), timeout=400,
                     env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}, keras_imported=True)  # fmt: skip
    assert "fresh ok GPT2CausalLM" in out
