"""Every piece of state a tf-keras model holds, read as numpy snapshots and given back to a rebuilt model.

* ``variables``: ``model.variables``, keyed by position and own name (:mod:`.walk`): every weight and
  every non-trainable statistic (BatchNormalization's moving mean and variance).
* ``optimizer_variables``: ``model.optimizer.variables`` of a ``tf_keras.optimizers.Optimizer``
  (iterations, slots, EMA copies), with whether it was built; on load the rebuilt optimizer is built
  for the rebuilt model's trainable variables and every value assigned in order.
* ``layer_states``: each random layer's generator (place ``rng/<layer position>``): its RNG type and
  seed counter as a small JSON asset, and, for a ``tf.random.Generator`` (after
  ``tf_keras.backend.experimental.enable_tf_random_generator()``), the generator's state variable;
  each lookup table (place ``table/<position>``: the vocabulary of a StringLookup, IntegerLookup or
  TextVectorization, which tf-keras lists among the weights as a ``TrackableWeightHandler``): numeric
  tensors as arrays, string tensors as a JSON asset.

After every value is given, each layer's ``finalize_state()`` runs, as tf-keras's own weight loading
does (Normalization derives its mean and variance tensors there).

Not carried: the running totals of compile metrics (tf-keras resets them at the start of every
``fit`` / ``evaluate``), and the state hidden inside TensorFlow's legacy stateful random ops, which
no API exposes (see docs/guide.md, "tf-keras").
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import _blueprint
from .._blueprint import CapturedState, LayerState, describe
from ..errors import KerasPicklingError, StateMismatchError
from . import classes, walk

_RNG_PREFIX = "rng/"
_RNG_ASSET = "random_generator.json"
_TABLE_PREFIX = "table/"


def read(variable: Any) -> np.ndarray:
    """A snapshot of a TensorFlow variable: training or assigning it later never changes the result.

    No copy: a resource variable's read is a copy-on-write view of its buffer, as for Keras 3 on
    TensorFlow (:func:`keras_pickle._keras3.backend.to_numpy`). Callers must not write to it.
    """
    return np.asarray(variable.value())


def capture(model: Any) -> CapturedState:
    """Every piece of ``model``'s state (see the module), as numpy snapshots."""
    optimizer = walk.optimizer_of(model)
    optimizer_variables, optimizer_built = [], False
    if optimizer is not None and not isinstance(optimizer, str):
        if classes.is_legacy_optimizer(optimizer):
            raise KerasPicklingError(
                f"Cannot pickle {describe(model)}: its optimizer is a tf_keras.optimizers.legacy "
                f"{type(optimizer).__name__}, whose slots are created lazily and keyed by TensorFlow object ids. "
                f"Compile with tf_keras.optimizers.{type(optimizer).__name__} (the default optimizers since "
                "tf-keras 2.11) and keras_pickle carries every slot."
            )
        optimizer_built = bool(getattr(optimizer, "_built", False))
        optimizer_variables = [(key, read(v)) for key, v in walk.keyed(list(optimizer.variables))]
    return CapturedState(
        variables=[(key, read(v)) for key, v in walk.model_variables(model)],
        optimizer_variables=optimizer_variables,
        layer_states=[_capture_generator(place, generator) for place, generator in walk.random_generators(model)]
        + [_capture_table(place, handler) for place, handler in walk.weight_handlers(model)],
        optimizer_built=optimizer_built,
    )


def _capture_generator(place: str, generator: Any) -> LayerState:
    facts = {"rng_type": generator._rng_type, "seed": generator._seed, "built": bool(generator._built)}
    own = []
    inner = getattr(generator, "_generator", None)
    if inner is not None:
        own.append(("state", read(inner.state)))
    return LayerState(place=_RNG_PREFIX + place, own_variables=own, assets=[(_RNG_ASSET, json.dumps(facts).encode())])


def _capture_table(place: str, handler: Any) -> LayerState:
    own, assets = [], []
    for position, tensor in enumerate(handler.get_tensors()):
        value = tensor.numpy()
        if value.dtype.kind in "OSU":
            tokens = [token.decode("utf-8", "surrogateescape") if isinstance(token, bytes) else str(token)
                      for token in value.reshape(-1).tolist()]  # fmt: skip
            assets.append((f"{position}.json", json.dumps(tokens).encode()))
        else:
            own.append((str(position), np.array(value, copy=True)))
    return LayerState(place=_TABLE_PREFIX + place, own_variables=own, assets=assets)


def _apply_table(handler: Any, layer_state: LayerState, *, where: str) -> None:
    tensors: dict[int, Any] = {}
    try:
        for key, value in layer_state.own_variables:
            tensors[int(key)] = value
        for path, content in layer_state.assets:
            tokens = json.loads(content)
            if not (isinstance(tokens, list) and all(isinstance(token, str) for token in tokens)):
                raise ValueError("not a list of strings")
            tensors[int(path.removesuffix(".json"))] = np.array(
                [token.encode("utf-8", "surrogateescape") for token in tokens], dtype=object
            )
    except (ValueError, TypeError) as e:
        raise StateMismatchError(f"Corrupt lookup-table state for {where}: {e}.") from e
    if sorted(tensors) != list(range(handler.num_tensors)):
        raise StateMismatchError(
            f"The payload holds {len(tensors)} tensors for {where}, whose table takes {handler.num_tensors}."
        )
    handler.set_weights([tensors[position] for position in range(handler.num_tensors)])


def apply_to_model(model: Any, state: CapturedState) -> None:
    """Give ``model`` (rebuilt from the config) every saved variable, random-generator and lookup-table
    state, then let each layer finalize its state."""
    targets = [v for _key, v in walk.model_variables(model)]
    assign_in_order(targets, state.variables, owner=describe(model))
    generators = dict(walk.random_generators(model))
    tables = dict(walk.weight_handlers(model))
    for layer_state in state.layer_states:
        place = str(layer_state.place)
        if place.startswith(_TABLE_PREFIX) and place.removeprefix(_TABLE_PREFIX) in tables:
            where = f"lookup table #{place.removeprefix(_TABLE_PREFIX)} of {describe(model)}"
            _apply_table(tables[place.removeprefix(_TABLE_PREFIX)], layer_state, where=where)
            continue
        generator = generators.get(place.removeprefix(_RNG_PREFIX)) if place.startswith(_RNG_PREFIX) else None
        if generator is None:
            raise StateMismatchError(
                f"The payload holds random-generator state for layer #{place} of {describe(model)}, "
                "which draws no random numbers in the model rebuilt from its config.",
                path=place,
            )
        _apply_generator(generator, layer_state, where=f"layer #{place} of {describe(model)}")
    for layer in walk.layers(model):
        if callable(getattr(layer, "finalize_state", None)):
            layer.finalize_state()


def _apply_generator(generator: Any, layer_state: LayerState, *, where: str) -> None:
    assets = dict(layer_state.assets)
    try:
        facts = json.loads(assets[_RNG_ASSET])
        rng_type, seed, built = facts["rng_type"], facts["seed"], facts["built"]
    except (KeyError, ValueError, TypeError) as e:
        raise StateMismatchError(f"Corrupt random-generator state for {where}: {e!r}.") from e
    if not (isinstance(rng_type, str) and (seed is None or isinstance(seed, int)) and isinstance(built, bool)):
        raise StateMismatchError(f"Corrupt random-generator state for {where}: {facts!r}.")
    generator._rng_type = rng_type
    generator._seed = seed
    own = dict(layer_state.own_variables)
    if built and not generator._built:
        generator._maybe_init()  # creates a tf.random.Generator from the seed; its saved state follows
        generator._seed = seed
    if "state" in own:
        inner = getattr(generator, "_generator", None)
        if inner is None:
            raise StateMismatchError(f"The payload holds a tf.random.Generator state for {where}, which has none.")
        assign_in_order([inner.state], [("state", own["state"])], owner=where)


def apply_to_optimizer(model: Any, state: CapturedState) -> None:
    """Build the rebuilt model's optimizer as the original's was and give it every saved value."""
    if not state.optimizer_variables:
        return
    optimizer = walk.optimizer_of(model)
    if optimizer is None or not classes.is_optimizer(optimizer):
        raise StateMismatchError(
            f"The payload holds optimizer state, but the rebuilt {describe(model)} has no optimizer: "
            "its compile config did not restore one."
        )
    targets = list(optimizer.variables)
    if state.optimizer_built and not getattr(optimizer, "_built", False):
        optimizer.build(model.trainable_variables)
        targets = list(optimizer.variables)
    elif not state.optimizer_built and getattr(optimizer, "_built", False):
        # tf-keras's compile_from_config builds the optimizer of a built model: its slots are the
        # zeros the first training step would create, its iterations come from the payload.
        targets = targets[: len(state.optimizer_variables)]
    assign_in_order(targets, state.optimizer_variables, owner=f"optimizer of {describe(model)}")


def assign_in_order(targets: list, values: list[tuple[str, Any]], *, owner: str) -> None:
    """Assign ``values`` to ``targets`` position by position, each checked for its name, shape and dtype
    (:func:`keras_pickle._blueprint.assign_in_order`)."""

    def assign_one(variable: Any, key: str, array: Any, where: str) -> None:
        saved_name = key.split("/", 1)[-1]
        if key != "state" and saved_name != walk.short_name(variable):
            raise StateMismatchError(
                f"{where} is named {saved_name!r} in the payload but {walk.short_name(variable)!r} in the object "
                "rebuilt from its config: the config does not describe the object that was pickled.",
                path=key,
            )
        dtype = np.dtype(variable.dtype.as_numpy_dtype)
        if dtype != array.dtype:
            raise StateMismatchError(
                f"{where} has dtype {array.dtype} in the payload but {dtype} in the object rebuilt from its config.",
                path=key,
            )
        if tuple(variable.shape) != tuple(array.shape):
            raise StateMismatchError(
                f"{where} has shape {tuple(array.shape)} in the payload but {tuple(variable.shape)} in the object "
                "rebuilt from its config. Check get_config() of the layer that owns it.",
                path=key,
            )
        variable.assign(array)

    _blueprint.assign_in_order(targets, values, owner=owner, assign_one=assign_one)
