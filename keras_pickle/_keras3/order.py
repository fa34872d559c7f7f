"""A rebuilt model lists its variables in the original's order.

``model.variables`` (and ``weights``, ``get_weights()``, the order an optimizer
builds its slots in) follows each layer's own lists, ``_trainable_variables``
and ``_non_trainable_variables``, in the order the layer created them. A layer
rebuilt from its config may create them in another order than the original
did: a Dense quantized to float8 after it was built holds its kernel before
its scales, one built under a float8 policy (as Keras's own load does too) its
scales first. Variables are matched to saved values by key whatever the order
(:mod:`keras_pickle._rebuild.assign_state`); this puts each layer's lists back in the
saved order, so that the copy's ``get_weights()`` lines up with the original's.
"""

from __future__ import annotations

from .census import Census

_OWN_LISTS = ("_trainable_variables", "_non_trainable_variables")


def follow_saved_order(census: Census, saved_keys: list[str]) -> bool:
    """Reorder the own variable lists of every layer of ``census`` as ``saved_keys`` lists their keys.

    ``saved_keys``: the original's variable keys, in its ``model.variables`` order. A list holding
    a variable whose key is not saved, or saved twice, is left as it is (its values were matched
    by position then). Lists are reordered in place (Keras's tracker holds them). Returns whether
    anything moved; the census then re-reads the variables (:meth:`Census.reread_variables`).
    """
    rank = {key: position for position, key in enumerate(saved_keys)}
    if len(rank) != len(saved_keys):
        return False
    key_of = {id(v): key for v, key in census.references}
    moved = False
    for layer in census.layers:
        for name in _OWN_LISTS:
            own = getattr(layer, name, None)
            if not isinstance(own, list) or len(own) < 2:
                continue
            ranks = [rank.get(key_of.get(id(v), ""), -1) for v in own]
            if -1 in ranks or ranks == sorted(ranks):
                continue
            own[:] = [v for _rank, v in sorted(zip(ranks, own), key=lambda pair: pair[0])]
            moved = True
    if moved:
        census.reread_variables()
    return moved
