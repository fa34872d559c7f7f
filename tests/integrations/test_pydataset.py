"""A multiprocessing keras.utils.PyDataset that holds a Keras model with a custom layer.

Only the spawn start method is tested: under fork, Keras's worker pool inherits the dataset
(nothing is pickled, so keras_pickle plays no part), and a forked child that runs TensorFlow
after its parent did can deadlock inside TensorFlow's thread pools.
"""

from __future__ import annotations

import textwrap

from helpers import TESTS_DIR, run_script

SCRIPT = """
    import multiprocessing, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np
    import keras_pickle
    import zoo

    class Batches(keras.utils.PyDataset):
        def __init__(self, preprocess, **kwargs):
            super().__init__(**kwargs)
            self.preprocess = preprocess  # a Keras model with a custom layer (zoo.Scale)

        def __len__(self):
            return 4

        def __getitem__(self, index):
            rng = np.random.default_rng(index)
            x = rng.normal(size=(8, zoo.FEATURES)).astype("float32")
            features = keras.ops.convert_to_numpy(self.preprocess(x))
            return features, features[:, :1] * 2.0

    if __name__ == "__main__":
        multiprocessing.set_start_method(sys.argv[1], force=True)
        keras_pickle.install()
        keras.utils.set_random_seed(0)
        preprocess = keras.Sequential([keras.Input((zoo.FEATURES,)), zoo.Scale(0.5), keras.layers.Dense(3)])
        dataset = Batches(preprocess, workers=2, use_multiprocessing=True)
        report = keras_pickle.check(dataset)
        assert report.ok, str(report)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        history = model.fit(dataset, epochs=2, verbose=0)
        assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))
        assert int(model.optimizer.iterations) == 8
        print("pydataset ok", sys.argv[1])
"""


def test_multiprocessing_pydataset_with_a_model_inside(tmp_path):
    start_method = "spawn"
    script = tmp_path / "train_with_pydataset.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}
    out = run_script(script, start_method, cwd=tmp_path, timeout=400, env=env)
    assert f"pydataset ok {start_method}" in out


UNPICKLABLE_SCRIPT = """
    import multiprocessing, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np
    import keras_pickle

    class Batches(keras.utils.PyDataset):
        def __init__(self, transform, **kwargs):
            super().__init__(**kwargs)
            self.transform = transform

        def __len__(self):
            return 4

        def __getitem__(self, index):
            x = np.random.default_rng(index).normal(size=(8, 3)).astype("float32")
            return self.transform(x), x[:, :1]

    if __name__ == "__main__":
        multiprocessing.set_start_method("spawn", force=True)
        keras_pickle.install()
        dataset = Batches(lambda x: x * 2.0, workers=2, use_multiprocessing=True)
        report = keras_pickle.check(dataset)
        print("PROBLEMS", [(p.path, p.reason) for p in report.problems])
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        try:
            model.fit(dataset, epochs=1, verbose=0)
            print("FIT ok")
        except Exception as e:
            print("FIT failed:", str(e).replace(os.linesep, " "))
"""


def test_check_tells_the_truth_about_a_dataset_spawn_cannot_send(tmp_path):
    """Under spawn, Keras pickles the dataset for its worker pool: what check() names is what fails."""
    script = tmp_path / "unpicklable_pydataset.py"
    script.write_text(textwrap.dedent(UNPICKLABLE_SCRIPT))
    out = run_script(script, cwd=tmp_path, timeout=400)
    problems = out.split("PROBLEMS ", 1)[1].splitlines()[0]
    assert problems.startswith("[('batches.transform', ") and "lambda" in problems, problems
    fit = out.split("FIT ", 1)[1]
    assert fit.startswith("failed:") and "Can't pickle <function <lambda>" in fit, fit
