"""Reads a baton run back from an MLflow tracking server with MLflow's own client, for the mlflow logger's test.

    read_mlflow.py TRACKING_URI EXPERIMENT RUN_NAME [RUN_FOLDER]

Finds the experiment's runs named RUN_NAME (there must be exactly one) and prints, as JSON, its status, parameters,
tags, artifact files (with their sizes) and metric histories. Given the run folder, it also compares the histories
with the folder's metrics.jsonl: every value of the file is in MLflow at its batch as the step (the file's last value
for a step, which is a resumed run's), no key has two values at a step, and MLflow has nothing the file does not.
Exits 1 naming the first difference.
"""
import json
import math
import os
import sys

from mlflow.tracking import MlflowClient


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def artifact_files(client, run_id, path=None):
    files = {}
    for item in client.list_artifacts(run_id, path):
        if item.is_dir:
            files.update(artifact_files(client, run_id, item.path))
        else:
            files[item.path] = item.file_size
    return files


def expected_values(run_folder):
    """{key: {step: value}} from metrics.jsonl, a later line winning (null is NaN)."""
    expected = {}
    with open(os.path.join(run_folder, "metrics.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            step = record["batch"]
            for key, value in record.items():
                if key in ("epoch", "batch", "sample"):
                    continue
                expected.setdefault(key, {})[step] = math.nan if value is None else float(value)
    return expected


def same(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def main():
    if len(sys.argv) not in (4, 5):
        fail(__doc__)
    uri, experiment_name, run_name = sys.argv[1:4]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        fail(f"no experiment '{experiment_name}' on {uri}")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`mlflow.runName` = '{run_name}'")
    if len(runs) != 1:
        fail(f"expected one run named '{run_name}' in '{experiment_name}', found {len(runs)}")
    run = runs[0]
    run_id = run.info.run_id
    histories = {}
    for key in run.data.metrics:
        history = client.get_metric_history(run_id, key)
        steps = [m.step for m in history]
        if len(steps) != len(set(steps)):
            fail(f"metric '{key}' has two values at one step: steps {sorted(steps)}")
        histories[key] = {m.step: m.value for m in history}
    if len(sys.argv) == 5:
        expected = expected_values(sys.argv[4])
        if set(expected) != set(histories):
            fail(f"metric keys differ: metrics.jsonl {sorted(expected)}, MLflow {sorted(histories)}")
        for key, values in expected.items():
            got = histories[key]
            if set(values) != set(got):
                fail(f"'{key}': steps in metrics.jsonl {sorted(values)}, in MLflow {sorted(got)}")
            for step, value in values.items():
                if not same(value, got[step]):
                    fail(f"'{key}' at step {step}: metrics.jsonl {value}, MLflow {got[step]}")
    print(json.dumps({
        "run_id": run_id,
        "status": run.info.status,
        "end_time_set": run.info.end_time is not None,
        "params": run.data.params,
        "tags": {k: v for k, v in run.data.tags.items()},
        "artifacts": artifact_files(client, run_id),
        "metrics": {key: {str(step): value if math.isfinite(value) else str(value)
                          for step, value in sorted(values.items())}
                    for key, values in histories.items()},
    }, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
