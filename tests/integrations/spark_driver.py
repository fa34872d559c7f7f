"""A Spark driver script, run as ``__main__``: four ways users send Keras models through Spark.

    python tests/integrations/spark_driver.py WORKDIR [--without-keras-pickle]

Starts ``local[2]``, runs each flow, stops Spark and prints one JSON line: per flow, what the
executors computed and what the driver expected (raw bytes, hex), or the error's last line.
``Gate`` is defined here, in the driver's ``__main__``, which executors (``pyspark.daemon``)
cannot import; ``ModuleGate`` lives in a module shipped with ``addPyFile``. Used by
tests/integrations/test_spark.py; ``--without-keras-pickle`` shows what Keras's own pickling does.
"""

import json
import pickle
import sys
import traceback
from pathlib import Path

import keras
import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

import keras_pickle

WORKDIR = Path(sys.argv[1])
MODULE_LAYER = """
import keras


class ModuleGate(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * keras.ops.tanh(self.w)
"""


class Gate(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * keras.ops.sigmoid(self.w)


def hexes(array) -> str:
    return np.ascontiguousarray(array, dtype="float32").tobytes().hex()


def model_of(layer, seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), layer, keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def state_of(model) -> list[str]:
    """Every variable (weights, optimizer), raw bytes as hex, in order."""
    return [keras.ops.convert_to_numpy(v.value).tobytes().hex() for v in model.variables + model.optimizer.variables]


def broadcast_flow(spark, frame, model):
    """The model broadcast (plain pickle) to executors that predict with ``mapInPandas``."""
    shared = spark.sparkContext.broadcast(model)

    def predict(batches):
        for batch in batches:
            x = batch[["a", "b", "c", "d"]].to_numpy("float32")
            yield pd.DataFrame({"i": batch["i"], "y": shared.value.predict(x, verbose=0)[:, 0]})

    rows = frame.mapInPandas(predict, "i long, y float").orderBy("i").toPandas()
    return hexes(rows["y"].to_numpy()), hexes(model.predict(features(frame), verbose=0)[:, 0])


def udf_flow(frame, model):
    """A pandas UDF whose closure holds the model (Spark pickles closures with cloudpickle)."""

    @pandas_udf("float")
    def predict(a: pd.Series, b: pd.Series, c: pd.Series, d: pd.Series) -> pd.Series:
        x = np.stack([a, b, c, d], axis=1).astype("float32")
        return pd.Series(model.predict(x, verbose=0)[:, 0])

    rows = frame.select("i", predict("a", "b", "c", "d").alias("y")).orderBy("i").toPandas()
    return hexes(rows["y"].to_numpy()), hexes(model.predict(features(frame), verbose=0)[:, 0])


def grouped_training_flow(frame):
    """``applyInPandas``: each group trains its own model on an executor and returns it pickled."""

    def train(batch):
        batch = batch.sort_values("i")
        group = int(batch["g"].iloc[0])
        model = model_of(Gate(), seed=group)
        x = batch[["a", "b", "c", "d"]].to_numpy("float32")
        model.fit(x, x.sum(axis=1), epochs=2, batch_size=4, shuffle=False, verbose=0)
        state, predicted = json.dumps(state_of(model)), hexes(model.predict(x, verbose=0))
        return pd.DataFrame({"g": [group], "model": [pickle.dumps(model)], "state": [state], "y": [predicted]})

    schema = "g long, model binary, state string, y string"
    rows = frame.groupBy("g").applyInPandas(train, schema).orderBy("g").toPandas()
    table = frame.orderBy("i").toPandas()
    found = []
    for _, row in rows.iterrows():
        model = pickle.loads(bytes(row["model"]))
        x = table[table["g"] == row["g"]][["a", "b", "c", "d"]].to_numpy("float32")
        found.append(
            {"same_state": state_of(model) == json.loads(row["state"]), "n_state": len(json.loads(row["state"])),
             "gate_is_drivers": type(model.layers[0]) is Gate,
             "same_predictions": hexes(model.predict(x, verbose=0)) == row["y"]}
        )  # fmt: skip
    return found


def features(frame) -> np.ndarray:
    return frame.orderBy("i").toPandas()[["a", "b", "c", "d"]].to_numpy("float32")


def run(name, flow, *args):
    try:
        return flow(*args)
    except Exception as e:
        lines = [line for line in "".join(traceback.format_exception_only(e)).splitlines() if line.strip()]
        errors = [line.strip() for line in str(e).splitlines() if "Error" in line or "Could not" in line]
        return {"error": (errors or lines)[-1][:400]}


def main() -> None:
    if "--without-keras-pickle" in sys.argv:
        keras_pickle.uninstall()
    else:
        keras_pickle.install()
    (WORKDIR / "spark_case_layers.py").write_text(MODULE_LAYER)
    sys.path.insert(0, str(WORKDIR))
    import spark_case_layers

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.sparkContext.addPyFile(str(WORKDIR / "spark_case_layers.py"))
        rng = np.random.default_rng(0)
        data = rng.normal(size=(16, 4)).astype("float32")
        frame = spark.createDataFrame(
            pd.DataFrame({"i": np.arange(16), "g": np.arange(16) % 2, **dict(zip("abcd", data.T.astype("float64")))})
        ).repartition(2)
        report = {
            "broadcast_module": run("broadcast_module", broadcast_flow, spark, frame,
                                    model_of(spark_case_layers.ModuleGate(), seed=1)),
            "broadcast_main": run("broadcast_main", broadcast_flow, spark, frame, model_of(Gate(), seed=2)),
            "udf_closure": run("udf_closure", udf_flow, frame, model_of(Gate(), seed=3)),
            "grouped_training": run("grouped_training", grouped_training_flow, frame),
        }  # fmt: skip
    finally:
        spark.stop()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
