"""Safe mode's rules, as data: what a payload may name or make Keras build, each entry with its reason.

Nothing here decides or imports: :func:`keras_pickle._safe_mode.decision.refusal` decides with these
tables and the vocabulary of what Keras's own packages define (:mod:`.tables`), :mod:`.config_judge` applies
them to every node of a config, :mod:`.resolution` resolves names as the unpickler and Keras would without
running code, and the dialect packages only say what their registry holds and how their Keras looks a
config's names up. Classes and modules are named by dotted path
(``package.attribute.attribute``); :func:`keras_pickle._safe_mode.resolution.static_path` looks them up in
what this process has imported, never importing (a Keras that is not imported contributes nothing).
"""

from __future__ import annotations

from .._wire import dialect_traits
from .._wire.schema import (
    BY_VALUE,
    DEFINED_HERE,
    PART_OF,
    RECONSTRUCTORS,
    REGISTERED,
    RESTORE,
    RESTORE_CALLBACK,
    RESTORE_WITH_STATE,
)

# --------------------------------------------------------------------------
# What the pickle stream may call
# --------------------------------------------------------------------------

CODECS_ENCODE = ("_codecs", "encode")
"""How protocols 0-2 spell ``bytes``: ``_codecs.encode(text, "latin1")``."""

_RECONSTRUCT = "numpy's own array pickles: only an empty array, shape (0,), of a plain dtype, whose data BUILD brings"
_SCALAR = "numpy's own scalar pickles: a plain dtype and exactly its bytes"
_FROMBUFFER = "numpy's protocol-5 arrays: a plain dtype over bytes or an out-of-band buffer, never an array"

CALLABLE_GLOBALS: dict[tuple[str, str], str] = {
    RESTORE: "the reconstructor every payload calls; it checks header and body before Keras builds anything",
    RESTORE_WITH_STATE: "a metric or unbuilt optimizer (install(allow=...)): a restore payload plus plain-data state",
    RESTORE_CALLBACK: "a Keras callback class and a dict of attribute names, set without running the class's code",
    PART_OF: "an optimizer or metric of a model the stream restored, along public attribute names",
    REGISTERED: "a name in Keras's registry, which only code that already ran fills; judged as a global",
    DEFINED_HERE: "a token only this very process issues; what it names is judged as a global",
    BY_VALUE: "a class of the writer's main script; its carried code runs only under allow_by_value=True",
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.multiarray", "scalar"): _SCALAR,
    ("numpy._core.multiarray", "scalar"): _SCALAR,
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy", "ndarray"): "only as _reconstruct's subtype, never called",
    ("numpy", "dtype"): "numpy's dtype pickles, completed by BUILD only as numpy would build it from its description",
    CODECS_ENCODE: "bytes under protocols 0-2, latin-1 only: another codec would import its module",
}
"""Every global the stream may call, and what each is allowed for (each checks its arguments when it runs:
keras_pickle's reconstructors in :mod:`keras_pickle._protocol`, the others in :mod:`.calls`)."""

EXPECTED_CALL_PREFIXES = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
    "numpy.dtype",
    "__setstate__ of the result of numpy.",
    *(f"{module}.{name}" for module, name in RECONSTRUCTORS),
)
"""The calls of :data:`CALLABLE_GLOBALS` as the inspector describes them."""

STANDARD_LIBRARY = "it is defined in the standard library ({module}), which a keras_pickle payload never names"
"""Why a standard-library global (``os.system``, ``builtins.eval``, ``subprocess.Popen``...) is refused
wherever it is named, whatever it is: a payload's stream and configs never need one."""

# --------------------------------------------------------------------------
# What a payload may name as a class or function (inert references, custom objects, config nodes)
# --------------------------------------------------------------------------

KERAS_PACKAGES = dialect_traits.PACKAGES
"""The packages Keras itself lives in: what they define is Keras's own (allowed, but never as a custom
object: Keras names its own)."""

KERAS3_IMPORTS = ("keras", "keras_hub", "keras_cv", "keras_nlp")
"""The packages whose modules Keras 3's deserializer imports to resolve a config's ``module`` (tf-keras
imports any module): a name in one that is not imported is refused, since safe mode never imports."""

ALLOWED_BASES: dict[str, str] = {
    "keras.src.saving.keras_saveable.KerasSaveable": "what Keras saves: layers, models, losses, metrics, optimizers",
    "keras.initializers.Initializer": "initializers",
    "keras.regularizers.Regularizer": "regularizers",
    "keras.constraints.Constraint": "constraints",
    "keras.optimizers.schedules.LearningRateSchedule": "learning-rate schedules",
    "keras.callbacks.Callback": "callbacks (only under allow_callbacks=True, below)",
    "keras.DTypePolicy": "dtype policies",
    "tf_keras.layers.Layer": "tf-keras layers and models",
    "tf_keras.losses.Loss": "tf-keras losses",
    "tf_keras.metrics.Metric": "tf-keras metrics",
    "tf_keras.optimizers.Optimizer": "tf-keras optimizers",
    "tf_keras.initializers.Initializer": "tf-keras initializers",
    "tf_keras.regularizers.Regularizer": "tf-keras regularizers",
    "tf_keras.constraints.Constraint": "tf-keras constraints",
    "tf_keras.optimizers.schedules.LearningRateSchedule": "tf-keras learning-rate schedules",
    "tf_keras.callbacks.Callback": "tf-keras callbacks (only under allow_callbacks=True)",
}
"""Keras's base classes: a subclass of one defined outside Keras's packages may be named (a user's layer is
the point of pickling a model); what Keras's packages define is judged by the vocabulary (:mod:`.tables`);
tf-keras's count where tf-keras is imported."""

CALLBACK_BASES: dict[str, str] = {
    "keras.callbacks.Callback": "callbacks act on files by design",
    "tf_keras.callbacks.Callback": "callbacks act on files by design",
}
"""Callbacks: refused unless the caller passes ``allow_callbacks=True`` (:data:`ALLOW_CALLBACKS_ADVICE`)."""

RECORD_CLASSES: dict[str, str] = {
    "keras.callbacks.History": "what fit() returns: plain records, allowed without allow_callbacks",
    "tf_keras.callbacks.History": "what fit() returns: plain records, allowed without allow_callbacks",
}

ALLOW_CALLBACKS_ADVICE = (
    "Callbacks act on files by design (ModelCheckpoint writes where its config says, BackupAndRestore deletes "
    "its directory). If you trust the source of this payload, load it with "
    "keras_pickle.loads(data, allow_callbacks=True)"
)

ALLOW_FUNCTION_ADVICE = (
    "If you trust it, register it with @keras.saving.register_keras_serializable() in the module that defines it "
    "(imported before loading), or name it yourself: keras_pickle.loads(data, custom_objects={{{key!r}: {path}}})"
)
"""The two ways to let safe mode load a plain function (both tested to work when followed)."""

# --------------------------------------------------------------------------
# What a config may make Keras build or do
# --------------------------------------------------------------------------

FOREIGN_LAYERS = {
    "TorchModuleWrapper": "a torch.nn.Module that Keras loads with torch.load (a pickle)",
    "JaxLayer": "JAX functions that Keras imports and calls",
    "FlaxLayer": "a Flax module that Keras rebuilds and calls",
    "TFSMLayer": "a TensorFlow SavedModel whose graph Keras loads and runs",
}
"""Keras layers that embed code or another format, and what loading one would run."""

REFUSED_LAYERS = {"Lambda": "the Python code stored in the payload", **FOREIGN_LAYERS}
"""Every layer kind safe mode refuses, under any spelling and any subclass, and what loading one would run."""

REFUSED_LAYER_HOMES = ("keras.layers", "tf_keras.layers")
"""Where the classes of :data:`REFUSED_LAYERS` are looked up (their subclasses are refused too)."""

STORED_CODE = "the Python code stored in the payload"
"""Why an inline lambda is refused in any dict of a config: Keras's ``__lambda__`` object, or a key ``K``
beside ``K_type`` set to ``"lambda"`` (tf-keras's cell wrappers' and Lambda's spelling), whatever class
holds it."""

FILE_READING_LAYERS: dict[str, tuple[str, ...]] = {
    "IndexLookup": ("vocabulary",),
    "StringLookup": ("vocabulary",),
    "IntegerLookup": ("vocabulary",),
    "TextVectorization": ("vocabulary",),
    "WordPieceTokenizer": ("vocabulary",),
    "BytePairTokenizer": ("vocabulary", "merges"),
    "SentencePieceTokenizer": ("proto",),
}
"""Layers that read a file (a local path or any URL their file system reaches) when a field of their config
holds a string, and those fields: Keras's and tf-keras's lookup layers and ``TextVectorization`` (through
``set_vocabulary``), KerasHub's tokenizers. Refused by name and for every subclass; and every class's
:data:`FILE_FIELDS` besides (Keras 3's and KerasHub's own safe mode, which keras_pickle holds, refuse some of
these files too; tf-keras's does not)."""

FILE_FIELDS = frozenset(
    {"vocabulary", "merges", "proto", "special_tokens", "language_tokens", "vocabulary_file", "ckpt_to_load_from"}
)
"""Config fields whose string a layer opens as a file, refused in every config node whatever its class: no
table of classes knows every layer that reads one (KerasHub's ``PARSeqTokenizer`` opens a string
``vocabulary`` with no safe-mode check of its own, ``WhisperTokenizer`` its ``special_tokens`` and
``language_tokens``, tf-keras's ``VocabularyFileCategoricalColumn`` its ``vocabulary_file`` in C++, an
``EmbeddingColumn`` its ``ckpt_to_load_from``). The fields are those Keras, tf-keras and KerasHub open. A
layer of someone else's that takes such a field as plain text is refused too, and loads with
``safe_mode=False``: the price of closing the class."""


def is_file_field(key: object) -> bool:
    """Whether a config key is one of :data:`FILE_FIELDS`."""
    return key in FILE_FIELDS


MERGED_MODULE_SUFFIX = "_fn_module"
"""How tf-keras's cell wrappers name the module they merge (``dropout_fn_module``, ``residual_fn_module``):
such a key is refused in every config node, whatever its class and whether ``K`` or ``K_type`` is beside it
(tf-keras merges the module before it reads either)."""

FILE_READING_HOMES = (
    "keras.layers",
    "keras.src.layers.preprocessing.index_lookup",
    "keras_hub.tokenizers",
    "tf_keras.layers",
    "tf_keras.src.layers.preprocessing.index_lookup",
)
"""Where the classes of :data:`FILE_READING_LAYERS` are looked up."""

FILE_READING = (
    "the layer would read that path (a local file or any URL its file system reaches) when it is built, a {field} "
    "file outside of the model archive"
)

MODULE_MERGING_LAYERS = ("DropoutWrapper", "ResidualWrapper", "_RNNCellWrapper", "_RNNCellWrapperV1")
"""tf-keras's RNN cell wrappers (by name, and their base classes for every subclass): their ``from_config``
merges the module a ``K_module`` key (beside ``K_type``: ``dropout_fn_module``, ``residual_fn_module``) names,
its whole namespace (``globals().update``), into tf-keras's cell-wrapper module for the rest of the process.
Keras 3 has no such code; in any other class's config a ``K_fn_module`` key, or a ``K_module`` beside ``K``
or ``K_type``, is refused all the same (:data:`MERGED_MODULE_SUFFIX`): a renamed subclass is a wrapper too."""

MODULE_MERGING_HOMES = ("tf_keras.src.layers.rnn.cell_wrappers", "tf_keras.src.layers.rnn.legacy_cell_wrappers")

WRAPPER_OWN_MODULES = frozenset({"tf_keras.src.layers.rnn.cell_wrappers", "keras.src.layers.rnn.cell_wrappers"})
"""The one module a cell wrapper's ``K_module`` may name: its own, whose namespace it merges into itself
(a no-op; a load with ``safe_mode=False`` may have written it)."""

MODULE_MERGING = (
    "tf-keras would merge that module's whole namespace into its RNN cell-wrapper module for the rest of the process"
)

# --------------------------------------------------------------------------
# tf-keras's op layers: what they may call
# --------------------------------------------------------------------------

OP_LAYERS_MODULE = "tf_keras.src.layers.core.tf_op_layer"
OP_LAYERS = {
    "TFOpLambda": "calls the TensorFlow API symbol its config names as 'function'",
    "SlicingOpLambda": "calls the TensorFlow API symbol its config names as 'function'",
    "ClassMethod": "calls the class method 'method_name' of the TensorFlow class 'cls_symbol'",
    "InstanceProperty": "reads the attribute 'attr_name' of its input tensor",
    "InstanceMethod": "calls the method 'attr_name' of its input tensor",
}
"""tf-keras's op layers (in :data:`OP_LAYERS_MODULE`), what each does with a name its config stores."""

TENSOR_OP_MODULES: dict[str, str] = {
    f"tensorflow.python.ops.{name}": what
    for names, what in (
        (("array_ops", "array_ops_stack", "gen_array_ops", "manip_ops", "gen_manip_ops", "tensor_getitem_override"),
         "arrays"),
        (("math_ops", "gen_math_ops", "special_math_ops", "gen_special_math_ops", "clip_ops", "sort_ops",
          "gen_bitwise_ops", "histogram_ops", "bincount_ops", "gen_count_ops", "check_ops"), "math"),
        (("nn_ops", "gen_nn_ops", "nn_impl", "embedding_ops", "ctc_ops"), "neural-network ops, CTC included"),
        (("linalg_ops", "gen_linalg_ops", "linalg.linalg_impl"), "linear algebra"),
        (("gen_spectral_ops", "signal.fft_ops", "signal.spectral_ops", "signal.shape_ops"),
         "signal processing: FFTs, STFT and MDCT, framing"),
        (("string_ops", "gen_string_ops"), "strings"),
        (("image_ops_impl", "gen_image_ops"), "images"),
        (("random_ops", "gen_random_ops", "stateless_random_ops", "gen_stateless_random_ops",
          "gen_stateless_random_ops_v2"), "random numbers"),
        (("sparse_ops", "gen_sparse_ops"), "sparse tensors"),
        (("numpy_ops.np_math_ops", "numpy_ops.np_array_ops"), "tf.experimental.numpy"),
        (("ragged.ragged_tensor", "ragged.ragged_array_ops", "ragged.ragged_math_ops", "ragged.ragged_concat_ops",
          "ragged.ragged_getitem", "ragged.ragged_string_ops", "ragged.ragged_factory_ops",
          "ragged.ragged_functional_ops", "gen_ragged_array_ops", "gen_ragged_math_ops",
          "gen_ragged_conversion_ops"), "ragged tensors"),
    )
    for name in names
}  # fmt: skip
"""TensorFlow's modules of tensor computation, and what each computes: what tf-keras's op layers may call in
safe mode. An allow-list: a TensorFlow function defined anywhere else (file and ``gfile`` I/O, ``tf.print``'s
output streams, ``py_function``, ``load_op_library``, ``saved_model``, summaries, lookup-table initializers
that read files, resource and collective ops, ``tf.data``) is refused."""

REFUSED_TENSOR_OPS: dict[tuple[str, str], str] = {
    ("tensorflow.python.ops.gen_array_ops", "immutable_const"): "it memory-maps the file its arguments name",
    ("tensorflow.python.ops.gen_sparse_ops", "add_sparse_to_tensors_map"): "it writes to a shared resource",
    ("tensorflow.python.ops.gen_sparse_ops", "add_many_sparse_to_tensors_map"): "it writes to a shared resource",
    ("tensorflow.python.ops.gen_sparse_ops", "take_many_sparse_from_tensors_map"): "it reads a shared resource",
}
"""The functions of :data:`TENSOR_OP_MODULES` that act outside the tensors they are given, by (module, name):
refused like any function outside them (``raw_ops.ImmutableConst`` reads a file by memory mapping)."""
