"""MLflow sink (`log.mlflow=true`, the extra `pip install 'attnlab[mlflow]'`): a run per job.

A single run is a run of the experiment `attnlab`; a sweep is one experiment named by its folder
(`runs/multirun/2026-11-30/11-30-23`) with a run per job. Experiments are of MLflow's kind
"custom model development" (a model's measurements, not GenAI traces). A run is named by its
variant, the values the sweep varied (a single run: the values its command line gave) and its
seed: `unscaled d_out=8 s1`. Each run gets the flattened config as params
(attnlab.reporting.metrics, as TensorBoard's HParams), every numeric diagnostic as a metric (step 0;
an n_seeds job puts each seed at step=seed), the heatmaps as PNG artifacts
(`heatmaps/<variant|reference|difference>/<stage>.png`, TensorBoard's images), record.json and the
job's report.html; the findings in sentences as the run's description (`mlflow.note.content`);
tags `attnlab.status`, `attnlab.first_divergent_stage`, `attnlab.diagnosis.findings` (codes),
`attnlab.job_dir`, `attnlab.records` (a digest of the record files it logged). A job written
again (a resumed sweep's job killed before its last output) ends its earlier run KILLED if that
was left RUNNING, and logs nothing twice: a FINISHED run of the same records stands.

The store is where MLflow itself writes by default, so `mlflow ui` and `mlflow.search_runs()` in
the working folder read it with no flag or variable: `sink.mlflow.tracking_uri`, else
MLFLOW_TRACKING_URI, else MLflow's default (a sqlite `mlflow.db` in the working folder; `./mlruns`
where that folder already holds MLflow's old file store). The extra brings sqlalchemy and alembic,
which mlflow-skinny needs for sqlite. The store is created when the sink is built, under a lock:
attnlab's sweeper builds every sink before the first job, so a sweep's parallel jobs find it
there (two processes creating one sqlite store at once lost one's runs). That lock is in the
user's private folder (attnlab.locks), opened without following links, and given up with one line
naming its holder after ATTNLAB_LOCK_TIMEOUT_S seconds.

mlflow is imported when the sink is built, i.e. only with log.mlflow=true, with its usage
telemetry off (attnlab sends nothing off the machine unless asked): MLFLOW_DISABLE_TELEMETRY=false
in the environment turns it on.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.errors import UserError
from attnlab.locks import locked, private_dir
from attnlab.record import Record
from attnlab.record.completion import record_digests
from attnlab.reporting.metrics import findings_markdown, hparams, metric_values, override_hparams, run_label
from attnlab.reporting.multirun import swept_hparams
from attnlab.sinks.base import REPORT_FILE, JobInfo

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from attnlab.training.job import TrainingResult

INSTALL_HINT = "log.mlflow=true needs mlflow: pip install 'attnlab[mlflow]'"
SINGLE_RUN_EXPERIMENT = "attnlab"
LOCK_FILE = ".mlflow.lock"  # in the sweep folder: parallel jobs create the sweep's experiment once
BATCH = 100  # MLflow's limit of params (and tags) per log_batch call
PARAM_LENGTH = 6000  # MLflow's limit of a param value's length
TAG_LENGTH = 8000  # MLflow's limit of a tag value's length: many heads' findings can pass it
# MLflow 3 shows an experiment by its kind: without it, its UI may open attnlab's runs as GenAI traces
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
NOTE_TAG = "mlflow.note.content"  # a run's description in MLflow's UI (markdown)
TELEMETRY_ENV = "MLFLOW_DISABLE_TELEMETRY"
JOB_DIR_TAG = "attnlab.job_dir"
RECORDS_TAG = "attnlab.records"  # a digest of the job's record files: which records a run logged


class MlflowSink:
    """`log.mlflow`: the job as an MLflow run (see the module's docstring)."""

    def __init__(self, tracking_uri: str | None = None, images: bool = True) -> None:
        import_mlflow()  # the one-line error belongs before any work, not after it
        self.tracking_uri = store_uri(tracking_uri)
        self.images = images
        if not self.tracking_uri.startswith(("http:", "https:", "databricks")):
            create_store(self.tracking_uri)  # before any job of a sweep: see the module's docstring

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client = self.client()
        experiment_id = self.experiment_id(client, job)
        first = next((r for r in records if r.ok), records[0])
        job_dir = str(Path(job.dir).resolve())
        digest = hashlib.sha256(json.dumps(record_digests(Path(job.dir)), sort_keys=True).encode()).hexdigest()
        if end_earlier_runs(client, experiment_id, job_dir, digest):
            return  # this job's records are logged already (a resumed job whose later output was missing)
        run = client.create_run(experiment_id, run_name=run_name(first, job),
                                tags={JOB_DIR_TAG: job_dir, RECORDS_TAG: digest})  # findable if this process dies
        run_id = run.info.run_id
        params = [Param(key, str(value)[:PARAM_LENGTH]) for key, value in hparams(first).items()]
        tags = [RunTag("attnlab.status", "ok" if all(r.ok for r in records) else "failed"),
                RunTag("attnlab.first_divergent_stage", str(first.first_divergent_stage or "none")),
                RunTag("attnlab.diagnosis.findings", " ".join(sorted({f.code for r in records for f in r.findings})) or "none"),
                RunTag(NOTE_TAG, findings_markdown(first)[:TAG_LENGTH])]
        now = int(time.time() * 1000)
        metrics = [Metric(tag, value, now, 0 if len(records) == 1 else record.seed)
                   for record in records if record.ok for tag, value in metric_values(record).items()]
        for start in range(0, max(len(params), len(tags)), BATCH):
            client.log_batch(run_id, params=params[start:start + BATCH], tags=tags[start:start + BATCH])
        for start in range(0, len(metrics), 1000):  # MLflow's limit of metrics per log_batch call
            client.log_batch(run_id, metrics=metrics[start:start + 1000])
        for record in records:
            if record.path is not None and Path(record.path).exists():
                folder = None if len(records) == 1 else f"seed-{record.seed}"
                client.log_artifact(run_id, str(record.path), artifact_path=folder)
        report = Path(job.dir) / REPORT_FILE  # the html sink runs first: its page is there when it is on
        if report.exists():
            client.log_artifact(run_id, str(report))
        if self.images and first.ok:
            self._log_heatmaps(client, run_id, first, job.dir)
        client.set_terminated(run_id, "FINISHED" if all(r.ok for r in records) else "FAILED")
        if job.sweep_dir is None:  # a sweep's jobs would repeat it: the sweep's experiment is named by its folder
            print(f"mlflow: run '{run.info.run_name}' in experiment '{SINGLE_RUN_EXPERIMENT}' "
                  f"(open it: {ui_command(self.tracking_uri)})", flush=True)

    def write_training(self, result: TrainingResult, job: JobInfo) -> None:
        """One MLflow run per side and seed, every scalar at its training step."""
        from mlflow.entities import Metric

        from attnlab.sinks.training_files import side_label, step_scalars
        from attnlab.training.job import SIDES

        data = result.as_dict()
        client = self.client()
        experiment_id = self.experiment_id(client, JobInfo(job.dir))
        for run in data["seeds"]:
            for side in SIDES:
                mlflow_run = client.create_run(experiment_id, run_name=f"{side_label(data, side)} seed={run['seed']}")
                metrics = [Metric(tag.replace("/", "."), value, 0, step)
                           for step, values in step_scalars(run[side]).items() for tag, value in values.items()]
                for start in range(0, len(metrics), 1000):  # MLflow's limit per log_batch call
                    client.log_batch(mlflow_run.info.run_id, metrics=metrics[start:start + 1000])
                client.set_tag(mlflow_run.info.run_id, "attnlab.verdict", " ".join(data["verdict"])[:5000])
                client.set_terminated(mlflow_run.info.run_id)

    def client(self) -> MlflowClient:
        from mlflow import MlflowClient

        if self.tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # see the module's docstring
        return MlflowClient(tracking_uri=self.tracking_uri)

    def experiment_id(self, client: MlflowClient, job: JobInfo) -> str:
        """The sweep's experiment (created by the first of its jobs), or `attnlab` for a single run."""
        if job.sweep_dir is None:
            return _get_or_create(client, SINGLE_RUN_EXPERIMENT)
        with locked(Path(job.sweep_dir) / LOCK_FILE, "the sweep's MLflow experiment"):
            return _get_or_create(client, _display(job.sweep_dir))

    def _log_heatmaps(self, client: MlflowClient, run_id: str, record: Record, job_dir: Path) -> None:
        from attnlab.reporting.job_heatmaps import FOLDER, job_heatmaps

        job_heatmaps(record, job_dir)  # drawn once per job: read back when another sink drew them
        client.log_artifacts(run_id, str(Path(job_dir) / FOLDER), artifact_path=FOLDER)


def end_earlier_runs(client: MlflowClient, experiment_id: str, job_dir: str, digest: str) -> bool:
    """The runs an earlier process made for this job folder: one still RUNNING (that process died:
    a resumed sweep holds the folder's lock) is ended KILLED; True when one finished with these
    very records, so there is nothing to log again."""
    if "'" in job_dir:  # MLflow's filter grammar has no escape for a quote: such a folder is not searched
        return False
    logged = False
    for run in client.search_runs([experiment_id], filter_string=f"tags.`{JOB_DIR_TAG}` = '{job_dir}'"):
        if run.info.status in ("RUNNING", "SCHEDULED"):
            client.set_terminated(run.info.run_id, "KILLED")
        elif run.info.status in ("FINISHED", "FAILED") and run.data.tags.get(RECORDS_TAG) == digest:
            logged = True
    return logged


def import_mlflow() -> None:
    """mlflow imported with its usage telemetry off unless the user's environment turns it on."""
    os.environ.setdefault(TELEMETRY_ENV, "true")
    already = "mlflow" in sys.modules
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    if already:  # imported before the variable was set: its telemetry client re-reads it
        from mlflow.telemetry import set_telemetry_client

        set_telemetry_client()


def run_name(record: Record, job: JobInfo) -> str:
    """`unscaled d_out=8 s1`: the variant, the values the sweep varied (a single run: those its
    command line gave) and the seed; the experiment and the attnlab.job_dir tag say where."""
    keys = swept_hparams(job.sweep_dir) if job.sweep_dir is not None else override_hparams(job.overrides)
    return run_label(record, keys)


def store_uri(tracking_uri: str | None) -> str:
    """The store: `tracking_uri`, else MLFLOW_TRACKING_URI, else MLflow's own default for the working
    folder, made absolute (a joblib or SLURM worker may not start in the working folder)."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    import mlflow

    default = mlflow.get_tracking_uri()  # sqlite:///<cwd>/mlflow.db, or ./mlruns where it already holds runs
    if default.startswith("sqlite:///") and not default.startswith("sqlite:////"):  # relative: pin the folder
        return "sqlite:///" + str((Path.cwd() / default[len("sqlite:///"):]).resolve())
    return default


def ui_command(uri: str) -> str:
    """The command that opens MLflow's UI on `uri` from the working folder: plain `mlflow ui` where
    that is MLflow's own default there."""
    own_default = not os.environ.get("MLFLOW_TRACKING_URI") and uri == store_uri(None)
    return "mlflow ui" if own_default else f"mlflow ui --backend-store-uri {uri}"


def create_store(uri: str) -> None:
    """Open the store once, creating it (a sqlite file and its tables) if needed, one process at a
    time: the first open of a sqlite store creates and migrates its schema."""
    from mlflow import MlflowClient

    lock = private_dir() / f"mlflow-{hashlib.sha1(uri.encode()).hexdigest()[:16]}.lock"
    with locked(lock, f"the MLflow store {uri}"):
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)


def _get_or_create(client: MlflowClient, name: str) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if EXPERIMENT_KIND[0] not in experiment.tags:  # made by an older attnlab, or by hand
            client.set_experiment_tag(experiment.experiment_id, *EXPERIMENT_KIND)
        return experiment.experiment_id
    try:
        return client.create_experiment(name, tags=dict([EXPERIMENT_KIND]))
    except MlflowException:  # another process created it between the two calls (a store without our lock)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def _display(path: Path | str) -> str:
    from attnlab.shown_paths import display_path

    return display_path(path)


__all__ = ["EXPERIMENT_KIND", "INSTALL_HINT", "MlflowSink", "create_store", "import_mlflow", "run_name", "store_uri"]
