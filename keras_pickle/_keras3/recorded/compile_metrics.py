"""The running totals of a fitted model's compile metrics, carried in its payload.

What ``model.get_metrics_result()`` reads after ``fit()`` or ``evaluate()``: the loss tracker, the
metrics given to ``compile()`` (Keras's ``CompileMetrics``) and, for a model with several losses, each
loss's own tracker (``CompileLoss.metrics``). They travel in the body's ``metric_variables`` section,
after the metrics the model's layers hold as attributes, and only where the compile metrics were built
(a model compiled with metrics that has seen a batch): a model compiled without metrics, or never fitted,
carries exactly what it did before.

Keras builds these metrics on the first batch, and what it builds depends on the labels' shape: the
string ``"accuracy"`` becomes a binary, categorical or sparse categorical accuracy, ``"crossentropy"`` the
matching loss. So each key names the metric's position and class (``compile_metrics/0/AUC/true_positives``),
or the loss its tracker follows (``compile_loss/1/sparse_categorical_crossentropy/total``); the loss
tracker's are ``compile_loss/total`` and ``compile_loss/count``. On load (:func:`build_to_receive`) they
are built from the rebuilt model's output specs, with labels shaped like the outputs, else with sparse
labels (a last dimension of 1): the first that makes exactly the payload's keys is kept, so the rebuilt
model trains with what the original resolved; none that does is a :class:`StateMismatchError`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import tree

from ...errors import StateMismatchError

METRICS_PREFIX = "compile_metrics/"
LOSS_PREFIX = "compile_loss/"


def carried(model: Any) -> list[tuple[str, Any]]:
    """``(key, variable)`` of every compile-time metric of ``model`` whose totals travel: none unless its
    compile metrics are built."""
    compile_metrics = getattr(model, "_compile_metrics", None)
    if not (isinstance(model, keras.Model) and getattr(compile_metrics, "built", False)):
        return []
    if not compile_metrics.variables:
        return []
    found = [(f"{LOSS_PREFIX}{v.name}", v) for v in _loss_tracker_variables(model)]
    for position, metric in enumerate(compile_metrics.metrics):
        found += [(f"{METRICS_PREFIX}{position}/{type(metric).__name__}/{v.name}", v) for v in metric.variables]
    compile_loss = getattr(model, "_compile_loss", None)
    if getattr(compile_loss, "built", False) and compile_loss.metrics:
        losses = compile_loss._flat_losses
        for position, (tracker, loss) in enumerate(zip(compile_loss.metrics, losses)):
            resolved = _loss_name(loss.loss)
            found += [(f"{LOSS_PREFIX}{position}/{resolved}/{v.name}", v) for v in tracker.variables]
    return found


def is_carried_key(key: str) -> bool:
    return key.startswith((METRICS_PREFIX, LOSS_PREFIX))


def build_to_receive(model: Any, saved_keys: list[str]) -> None:
    """Build the compile metrics (and, where the payload holds their trackers, the compile losses) of the
    rebuilt ``model`` so that :func:`carried` names exactly the compile keys among ``saved_keys``.

    Nothing happens where the payload carries none. Raises :class:`StateMismatchError` where the
    rebuilt model has no compile metrics or no build makes the payload's keys.
    """
    wanted = sorted(key for key in saved_keys if is_carried_key(key))
    if not wanted:
        return
    compile_metrics = getattr(model, "_compile_metrics", None)
    if compile_metrics is None:
        raise StateMismatchError(
            f"The payload holds the running totals of the compile metrics of {type(model).__name__} "
            f"'{model.name}', but the rebuilt model was compiled without metrics: its compile config did not "
            "restore them."
        )
    with_losses = any(key[len(LOSS_PREFIX) :].split("/")[0].isdigit() for key in wanted if key.startswith(LOSS_PREFIX))
    tried = []
    for sparse_labels in (False, True):
        try:
            _build(model, sparse_labels=sparse_labels, with_losses=with_losses)
        except Exception as e:  # Keras refused these shapes: the other labels may fit
            tried.append(f"{type(e).__name__}: {e}")
            continue
        made = sorted(key for key, _variable in carried(model))
        if made == wanted:
            return
        tried.append(f"made {', '.join(made) or 'nothing'}")
    raise StateMismatchError(
        f"The payload holds the running totals of the compile metrics of {type(model).__name__} "
        f"'{model.name}' ({', '.join(wanted)}), but building the rebuilt model's compile metrics from its "
        f"outputs did not make the same metrics ({'; '.join(tried)})."
    )


def _build(model: Any, *, sparse_labels: bool, with_losses: bool) -> None:
    y_pred = _output_spec(model)

    def labels(spec: Any) -> Any:
        shape = tuple(spec.shape)
        if sparse_labels and shape:
            shape = shape[:-1] + (1,)
        return keras.KerasTensor(shape, dtype=spec.dtype)

    y_true = tree.map_structure(labels, y_pred)
    compile_metrics = model._compile_metrics
    compile_metrics.built = False
    compile_metrics.build(y_true, y_pred)
    compile_loss = getattr(model, "_compile_loss", None)
    if with_losses and compile_loss is not None:
        compile_loss.built = False
        compile_loss._metrics.clear()  # the trackers an earlier try added
        compile_loss.build(y_true, y_pred)


def _output_spec(model: Any) -> Any:
    """What ``model`` returns for a batch, as symbolic tensors: a Functional's (or a Sequential's) recorded
    outputs, else computed from the input shape its build config records."""
    functional = getattr(model, "_functional", None) or model  # a Sequential holds its graph there
    outputs = getattr(functional, "_outputs_struct", None)
    if outputs is None:
        input_shape = (model.get_build_config() or {}).get("input_shape")
        if input_shape is None:
            raise ValueError("the rebuilt model records no input shape")
        inputs = tree.map_shape_structure(lambda shape: keras.KerasTensor(shape), input_shape)
        outputs = keras.src.backend.compute_output_spec(model, inputs, training=False)
    return tree.map_structure(lambda t: keras.KerasTensor(t.shape, dtype=t.dtype), outputs)


def _loss_tracker_variables(model: Any) -> list:
    tracker = getattr(model, "_loss_tracker", None)
    return list(tracker.variables) if tracker is not None else []


def _loss_name(loss: Any) -> str:
    function = getattr(loss, "fn", loss)  # LossFunctionWrapper
    return getattr(function, "__name__", type(function).__name__)
