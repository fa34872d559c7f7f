"""What a Keras 3 config cannot say, recorded while ``install()`` is active and replayed on load.

* :mod:`.records`: constructor arguments, ``compile()`` calls, which model owns an optimizer or metric.
* :mod:`.signatures`: cached signature reads for the recording hooks.
* :mod:`.construct`: objects rebuilt from recorded constructor calls: placeholders in the config.
* :mod:`.compile`: a rebuilt model compiled as the original was: compile config, a replayed ``compile()``.
* :mod:`.compile_objects`: losses, metrics and schedules that travel through their recorded constructor calls.
* :mod:`.compile_metrics`: the running totals of a fitted model's compile metrics.
* :mod:`.weight_decay`: what ``exclude_from_weight_decay()`` sets and an optimizer's config omits.
"""
