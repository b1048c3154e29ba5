"""Operators: validate, plan and apply a spec, roll back, export, expire; begin, commit and
abort a distributed transaction (write-audit-publish) — thin over the library."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from datetime import timedelta
from fnmatch import fnmatchcase
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator, Context, TriggerRule
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from olympia import versions
from olympia.catalog.catalog import Catalog
from olympia.exceptions import (
    CommitConflict,
    NotFoundError,
    OlympiaError,
    TransactionExpiredError,
)
from olympia.expire import ExpirePolicy, expire_with_spark
from olympia.plan import ApplyResult, Plan, apply_plan, make_plan
from olympia.plan.rollback import apply_rollback, plan_rollback
from olympia.spec import load_spec
from olympia_provider.assets import catalog_asset, changes_alias, object_asset
from olympia_provider.hooks.olympia import OlympiaHook, run_transaction_id
from olympia_provider.spark import (
    SparkLogRelay,
    local_session,
    run_submit,
    spark_submit_binary,
    submit_command,
)

__all__ = ["OlympiaAbortTransactionOperator", "OlympiaApplyOperator",
           "OlympiaBeginTransactionOperator", "OlympiaCommitTransactionOperator",
           "OlympiaExpireOperator", "OlympiaExportOperator", "OlympiaRollbackOperator",
           "OlympiaValidateOperator", "catalog_asset", "changes_alias", "object_asset"]
#: Annotations the operators record with every version they make (and every transaction
#: they begin): who (``user``), and the DAG, run and task; ``airflow_triggered_by`` when a
#: person triggered the run.
AIRFLOW_INFO = ("user", "airflow_dag", "airflow_run", "airflow_task", "airflow_triggered_by")


def actor_info(context: Context, task_id: str, user: str | None = None) -> dict[str, str]:
    """The annotations naming who makes a version from a task: ``user`` (``user``, else
    ``airflow:<dag_id>``), ``airflow_dag``, ``airflow_run``, ``airflow_task`` and, when a
    person triggered the run, ``airflow_triggered_by``."""
    dag_id = context["dag"].dag_id
    info = {"user": user or f"airflow:{dag_id}", "airflow_dag": dag_id,
            "airflow_run": context["run_id"], "airflow_task": task_id}
    if triggered_by := context["dag_run"].triggering_user_name:
        info["airflow_triggered_by"] = triggered_by
    return info


def _optional_int(value: Any) -> int | None:
    """Templated fields arrive as strings; empty means unset."""
    return None if value is None or value == "" else int(value)


class _OlympiaOperator(BaseOperator):
    def __init__(self, *, olympia_conn_id: str = OlympiaHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.olympia_conn_id = olympia_conn_id

    @property
    def hook(self) -> OlympiaHook:
        return OlympiaHook(self.olympia_conn_id)

    def emit(self, context: Context, extra: dict[str, Any],
             object_actions: Mapping[str, str] | None = None) -> None:
        """Asset events for a committed version: plain Asset outlets get ``extra``; each
        alias gets the catalog's Asset (with ``extra``) and, for each object in
        ``object_actions``, that object's Asset with ``{"version", "action"}``."""
        events = context["outlet_events"]
        aliases = [o for o in self.outlets if isinstance(o, AssetAlias)]
        catalog_uri = self.hook.settings()[0] if aliases else ""
        for outlet in self.outlets:
            if isinstance(outlet, AssetAlias):
                events[outlet].add(catalog_asset(catalog_uri), extra=extra)
                for name, action in (object_actions or {}).items():
                    events[outlet].add(object_asset(catalog_uri, name),
                                       extra={"version": extra.get("version"),
                                              "action": action})
            elif isinstance(outlet, Asset):
                events[outlet].extra = extra


class OlympiaValidateOperator(BaseOperator):
    """Validate the spec at ``spec_path`` without touching any catalog; returns its summary.
    A :class:`~olympia.exceptions.SpecError` fails the task listing every problem."""

    template_fields: Sequence[str] = ("spec_path", "variables")

    def __init__(self, *, spec_path: str, variables: Mapping[str, str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.variables = variables

    def execute(self, context: Context) -> str:
        try:
            summary = load_spec(self.spec_path, self.variables).summary()
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("Valid: %s", summary)
        return summary


class OlympiaApplyOperator(_OlympiaOperator):
    """Plan ``spec_path`` (or take a saved plan: ``plan``, its JSON form, or ``plan_path``)
    and apply it as one version; returns ``{"version", "changes", "changed_objects"}`` and
    emits Asset events.

    With ``plan_only`` it returns the plan's JSON form instead (it has ``has_changes`` and
    ``summary``), which the apply task takes as ``plan=plan_task.output`` from any worker;
    with ``plan_out`` it saves the plan to that file (a path every worker can read) and
    returns ``{"plan_path", "has_changes", "summary"}``.

    ``targets`` (``KIND.NAME``, as ``olympia plan --target``) limit a plan made from
    ``spec_path`` to those objects and what they need. ``user`` is recorded as the version's
    author (default ``airflow:<dag_id>``; :func:`actor_info`).

    ``object_events`` names the objects (``ns`` or ``ns.name``; ``fnmatch`` patterns such as
    ``sales.*``) whose change gets its own Asset event (:func:`object_asset`, extra
    ``{"version", "action"}``) through the alias outlets. List only objects a DAG schedules
    on: Airflow knows an Asset only when some DAG declares it.
    """

    template_fields: Sequence[str] = ("spec_path", "plan", "plan_path", "plan_out",
                                      "variables", "git_commit", "expected_base_version",
                                      "targets", "user")

    def __init__(self, *, spec_path: str | None = None, plan: Mapping[str, Any] | None = None,
                 plan_path: str | None = None, variables: Mapping[str, str] | None = None,
                 allow_destructive: bool = False, expected_base_version: int | None = None,
                 plan_only: bool = False, plan_out: str | None = None,
                 git_commit: str | None = None, object_events: Sequence[str] = (),
                 targets: Sequence[str] = (), user: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(object_events, str) or isinstance(targets, str):
            raise ValueError("object_events and targets are lists, not one string")
        if sum(x is not None for x in (spec_path, plan, plan_path)) != 1:
            raise ValueError("give exactly one of spec_path, plan and plan_path")
        if targets and spec_path is None:
            raise ValueError("targets limit a plan made from spec_path; a saved plan keeps "
                             "its own")
        self.spec_path = spec_path
        self.plan = plan
        self.plan_path = plan_path
        self.variables = variables
        self.allow_destructive = allow_destructive
        self.expected_base_version = expected_base_version
        self.plan_only = plan_only
        self.plan_out = plan_out
        self.git_commit = git_commit
        self.object_events = list(object_events)
        self.targets = list(targets)
        self.user = user

    def _object_actions(self, result: ApplyResult) -> dict[str, str]:
        """The announced changed objects, each with what happened to it (the plan's action
        on it, else "update": a namespace whose tables changed)."""
        named = {c["name"]: c["action"] for c in result.changes}
        named.update({c["from_name"]: c["action"] for c in result.changes if "from_name" in c})
        return {name: named.get(name, "update") for name in result.changed_objects
                if any(fnmatchcase(name, pattern) for pattern in self.object_events)}

    def execute(self, context: Context) -> dict[str, Any]:
        catalog = self.hook.get_catalog()
        try:
            if self.plan is not None:
                plan = Plan.from_dict(self.plan, "the plan given")
            elif self.plan_path:
                plan = Plan.load(self.plan_path)
            else:
                assert self.spec_path is not None
                plan = make_plan(catalog, load_spec(self.spec_path, self.variables),
                                 read_all=not self.plan_only, targets=self.targets)
            self.log.info("%s", plan.render_text(color=False))
            expected = _optional_int(self.expected_base_version)
            if expected is not None and plan.base_version != expected:
                raise AirflowException(
                    f"the plan's base version is {plan.base_version}, expected "
                    f"{self.expected_base_version}: the catalog moved, re-plan")
            if self.plan_only and not self.plan_out:
                self.log.info("Planned on version %d: %s", plan.base_version,
                              plan.summary_line())
                return plan.to_dict()
            if self.plan_only:
                assert self.plan_out is not None
                plan.save(self.plan_out)
                self.log.info("Planned on version %d, saved to %s: %s", plan.base_version,
                              self.plan_out, plan.summary_line())
                return {"plan_path": self.plan_out, "has_changes": plan.has_changes,
                        "summary": plan.summary()}
            info = actor_info(context, self.task_id, self.user)
            if self.git_commit:
                info["git_commit"] = self.git_commit
            result = apply_plan(catalog, plan, allow_destructive=self.allow_destructive,
                                info=info)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        if result.changes:
            self.emit(context, {"version": result.version, "changes": len(result.changes)},
                      self._object_actions(result))
            self.log.info("Applied %d changes as version %d", len(result.changes),
                          result.version)
        else:
            self.log.info("No changes: the catalog already matches the spec (version %d)",
                          result.version)
        return result.to_dict()


class OlympiaRollbackOperator(_OlympiaOperator):
    """Roll back to ``to_version`` (a number or "previous") with the gates of ``olympia
    rollback``: the changes are logged like a plan, protected objects are never dropped or
    changed incompatibly, other destructive changes need ``allow_destructive``, and
    ``dry_run`` commits nothing. Returns the changes (``changes``, ``summary``, ...) and the
    new version (None in a dry run), JSON-able. ``user`` is recorded as the version's author
    (default ``airflow:<dag_id>``; :func:`actor_info`)."""

    template_fields: Sequence[str] = ("to_version", "user")

    def __init__(self, *, to_version: int | str = "previous", allow_destructive: bool = False,
                 dry_run: bool = False, user: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user = user
        self.to_version = to_version
        self.allow_destructive = allow_destructive
        self.preview_only = dry_run  # BaseOperator has a dry_run() method

    def execute(self, context: Context) -> dict[str, Any]:
        catalog = self.hook.get_catalog()
        try:
            preview = plan_rollback(catalog, self.to_version)
            self.log.info("%s", preview.render_text(color=False))
            if self.preview_only:
                return {**preview.to_dict(), "version": None, "dry_run": True}
            version = apply_rollback(catalog, preview,
                                     allow_destructive=self.allow_destructive,
                                     info=actor_info(context, self.task_id, self.user))
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.emit(context, {"version": version, "rollback_to": str(self.to_version)})
        return {**preview.to_dict(), "version": version, "dry_run": False}


class OlympiaExportOperator(_OlympiaOperator):
    """Export the latest (or ``version``) as ``name`` to ``target_uri``; returns the record.

    Target storage options come from ``target_conn_id`` (another olympia connection, whose
    catalog URI is ignored) or default to this connection's. ``user`` is recorded as the
    author of the version holding the record (default ``airflow:<dag_id>``;
    :func:`actor_info`).
    """

    template_fields: Sequence[str] = ("export_name", "target_uri", "mode", "version", "user")

    def __init__(self, *, export_name: str, target_uri: str, mode: str = "full",
                 version: int | None = None, depth: int | None = None,
                 target_conn_id: str | None = None, user: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user = user
        self.export_name = export_name
        self.target_uri = target_uri
        self.mode = mode
        self.version = version
        self.depth = depth
        self.target_conn_id = target_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        catalog = self.hook.get_catalog()
        options = (OlympiaHook(self.target_conn_id).settings()[1] if self.target_conn_id
                   else catalog.storage.options)
        try:
            result = versions.export(
                catalog, self.export_name, self.target_uri, self.mode,
                target_storage_options=options,
                version=_optional_int(self.version),
                depth=self.depth, info=actor_info(context, self.task_id, self.user))
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("Exported version %d as %r (%s) to %s: %d files copied (%d bytes), "
                      "%d already there; recorded as version %d", result.version,
                      result.name, result.mode, result.target, result.files_copied,
                      result.bytes_copied, result.files_skipped, result.committed_version)
        self.emit(context, {"version": result.committed_version, "export": result.name})
        return result.to_dict()


class OlympiaExpireOperator(_OlympiaOperator):
    """Expire old versions and delete unreferenced files with the PySpark expiry job;
    returns the job's result.

    By default the job runs in-process on ``spark_master`` (else the connection's
    ``spark_master`` extra, else ``local[2]``): right for small catalogs. With
    ``spark_submit=True`` it is submitted with ``spark-submit`` (``spark_submit_binary``,
    else ``$SPARK_HOME/bin/spark-submit``, else pyspark's own) to ``spark_master`` with the
    ``spark_conf`` settings (``spark.log.level`` defaults to WARN), in client mode: the
    worker only waits for it. The storage
    options reach the job in its environment, never on its command line. Either way Spark's
    log lines reach the task log at their own level. Unset ``keep_last``, ``older_than`` and
    ``grace`` come from the catalog's ``olympia.expire.*`` properties, as in the CLI.
    """

    template_fields: Sequence[str] = ("keep_last", "older_than", "grace", "spark_master")

    def __init__(self, *, keep_last: int | None = None, older_than: str | None = None,
                 grace: str | None = None, dry_run: bool = False, force: bool = False,
                 spark_master: str | None = None, spark_submit: bool = False,
                 spark_conf: Mapping[str, str] | None = None,
                 spark_submit_binary: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keep_last = keep_last
        self.older_than = older_than
        self.grace = grace
        self.report_only = dry_run  # BaseOperator has a dry_run() method
        self.force = force
        self.spark_master = spark_master
        self.spark_submit = spark_submit
        self.spark_conf = dict(spark_conf or {})
        self.spark_submit_binary = spark_submit_binary
        self._process: subprocess.Popen[str] | None = None

    def _job_args(self, uri: str) -> list[str]:
        """The job's options for what this operator sets (the job resolves the rest)."""
        args = ["--catalog", uri]
        keep_last = _optional_int(self.keep_last)
        if keep_last is not None:
            args += ["--keep-last", str(keep_last)]
        if self.older_than:
            args += ["--older-than", self.older_than]
        if self.grace:
            args += ["--grace", self.grace]
        return args + ["--dry-run"] * self.report_only + ["--force"] * self.force

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.hook
        uri, options = hook.settings()
        master = self.spark_master or hook.spark_master
        relay = SparkLogRelay(self.log)
        try:
            catalog = Catalog.open(uri, options)  # the policy fails here, before Spark starts
            policy = ExpirePolicy.from_catalog(
                catalog, keep_last=_optional_int(self.keep_last),
                older_than=self.older_than or None, grace=self.grace or None,
                force=self.force)
            if self.spark_submit:
                command = submit_command(spark_submit_binary(self.spark_submit_binary),
                                         master, self._job_args(catalog.uri),
                                         {"spark.log.level": "WARN", **self.spark_conf})
                self.log.info("Submitting the expiry job: %s", " ".join(command))
                data = run_submit(command, options, relay, self._started)
            else:
                spark = local_session(master, relay)
                data = expire_with_spark(spark, catalog.uri, options, policy,
                                         self.report_only).to_dict()
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("%s %d versions, deleted %d files (%d failed) with %s on %s",
                      "Would expire" if self.report_only else "Expired",
                      data["versions_expired"], data["files_deleted"], data["files_failed"],
                      "spark-submit" if self.spark_submit else "in-process Spark", master)
        if data["files_failed"]:
            raise AirflowException(f"{data['files_failed']} files could not be deleted; "
                                   "re-run the job (it is idempotent)")
        return data

    def _started(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def on_kill(self) -> None:
        """Stop a submitted job's spark-submit (in client mode that ends the job)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()


class _TransactionOperator(_OlympiaOperator):
    """An operator on one distributed transaction: ``transaction_id`` (templated), by default
    the DAG run's own (:func:`~olympia_provider.hooks.olympia.run_transaction_id`)."""

    template_fields: Sequence[str] = ("transaction_id",)

    def __init__(self, *, transaction_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.transaction_id = transaction_id

    def resolved_id(self, context: Context) -> str:
        """The transaction's id: as rendered, or the run's own if unset or empty."""
        return self.transaction_id or run_transaction_id(context["dag"].dag_id,
                                                         context["run_id"])


class OlympiaBeginTransactionOperator(_TransactionOperator):
    """Begin a distributed transaction on the latest version; returns its id (XCom). Tasks
    that write inside it name it (``olympia serve``'s warehouse ``<warehouse>@txn:<id>``,
    :meth:`OlympiaHook.get_iceberg_catalog`, pyiceberg's ``olympia.transaction``): nothing
    they write is visible to other readers until the commit operator lands it all as ONE
    version.

    ``transaction_id`` defaults to the run's own, which the commit and abort operators
    default to too; a transaction of that id still open (an earlier try of this run left
    it) fails the task: abort it first. ``ttl``: how long it may stay open (``2h``, or a
    timedelta; default the catalog's). ``info``: annotations recorded with the version it
    commits, besides those of :func:`actor_info`, always recorded (``user`` overrides the
    author, default ``airflow:<dag_id>``).
    """

    template_fields: Sequence[str] = ("transaction_id", "ttl", "info", "user")

    def __init__(self, *, ttl: str | timedelta | None = None,
                 info: Mapping[str, str] | None = None, user: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        reserved = sorted(set(info or {}) & set(AIRFLOW_INFO))
        if reserved:
            raise ValueError(f"info keys {reserved} are recorded by the operator itself "
                             "(give the author as user=)")
        self.ttl = ttl
        self.info = dict(info or {})
        self.user = user

    def execute(self, context: Context) -> str:
        txn_id = self.resolved_id(context)
        info = {**{k: str(v) for k, v in self.info.items()},
                **actor_info(context, self.task_id, self.user)}
        try:
            self.hook.begin_transaction(txn_id, ttl=self.ttl or None, info=info)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("Began distributed transaction %s", txn_id)
        return txn_id


class OlympiaCommitTransactionOperator(_TransactionOperator):
    """Commit a distributed transaction: everything added to it lands as ONE version;
    returns the version (the beginning version if nothing was added) and, when a version
    is made, emits Asset events as the apply operator does (extra ``{"version",
    "transaction"}``).

    A version committed since the transaction began that conflicts with it fails the task
    without retries (the library aborts the transaction: nothing of it is visible), as does
    a transaction that is gone or expired; other errors (whether it landed is unknown) leave it to a
    retry, which finishes the commit.
    """

    def execute(self, context: Context) -> int:
        txn_id = self.resolved_id(context)
        try:
            result = self.hook.commit_transaction(txn_id)
        except (CommitConflict, NotFoundError, TransactionExpiredError) as exc:
            raise AirflowFailException(str(exc)) from exc
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        if result.new_version:
            self.emit(context, {"version": result.version, "transaction": txn_id})
            self.log.info("Committed distributed transaction %s as version %d", txn_id,
                          result.version)
        else:
            self.log.info("Distributed transaction %s held no change: the catalog stays at "
                          "version %d", txn_id, result.version)
        return result.version


class OlympiaAbortTransactionOperator(_TransactionOperator):
    """Abort a distributed transaction: nothing added to it ever becomes visible. Its
    ``trigger_rule`` defaults to ``one_failed``: downstream of the begin task and of every
    task that writes or audits, it runs when one of them fails. Keep it off the commit
    task's downstream side: the commit then stays a leaf of the DAG, so a failed audit fails
    the run (its leaves decide its state), and a commit that meets a conflict aborts the
    transaction itself. Returns whether there was one to abort:
    a transaction that never began or is gone already (a commit that met a conflict aborts
    it) is nothing to abort; one that this DAG run committed fails the task (abort cannot
    undo it), as does one being committed.

    Leave ``transaction_id`` unset when the begin operator's is (both default to the
    run's): the abort then needs no XCom of a begin task that may have failed.
    """

    def __init__(self, *, trigger_rule: str = TriggerRule.ONE_FAILED,
                 **kwargs: Any) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)

    def execute(self, context: Context) -> bool:
        txn_id = self.resolved_id(context)
        dag_run = context.get("dag_run")
        try:
            aborted = self.hook.abort_transaction(
                txn_id, began_after=getattr(dag_run, "start_date", None))
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        if aborted:
            self.log.info("Aborted distributed transaction %s: nothing of it is visible",
                          txn_id)
        else:
            self.log.info("No distributed transaction %s to abort (it never began, or was "
                          "aborted already)", txn_id)
        return aborted
