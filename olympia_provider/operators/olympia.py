"""Operators: validate, plan and apply a spec, roll back, export, expire — thin over the
library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from olympia import versions
from olympia.exceptions import OlympiaError
from olympia.expire import ExpirePolicy, expire_with_spark, local_session, parse_duration
from olympia.plan import Plan, apply_plan, make_plan
from olympia.plan.rollback import apply_rollback, plan_rollback
from olympia.spec import load_spec
from olympia_provider.hooks.olympia import OlympiaHook


def _optional_int(value: Any) -> int | None:
    """Templated fields arrive as strings; empty means unset."""
    return None if value is None or value == "" else int(value)


def catalog_asset(olympia_conn_id: str = OlympiaHook.default_conn_name) -> Asset:
    """The Asset updated whenever an operator commits a version through this connection."""
    return Asset(name=f"olympia-catalog-{olympia_conn_id}",
                 uri=f"olympia://{olympia_conn_id.replace('_', '-')}/")


def object_asset(olympia_conn_id: str, object_name: str) -> Asset:
    """The Asset of one namespace (``ns``) or table/view (``ns.name``) of the catalog."""
    return Asset(name=f"olympia-{olympia_conn_id}-{object_name}",
                 uri=f"olympia://{olympia_conn_id.replace('_', '-')}/{object_name}")


def changes_alias(olympia_conn_id: str = OlympiaHook.default_conn_name) -> AssetAlias:
    """Outlet alias under which apply emits, only when it commits a version, the catalog's
    Asset event and one Asset event per changed object. (Airflow emits an event for every
    plain Asset outlet of a successful task, so an apply that changed nothing would still
    trigger whatever is scheduled on a plain ``catalog_asset()`` outlet.)"""
    return AssetAlias(f"olympia-changes-{olympia_conn_id}")


class _OlympiaOperator(BaseOperator):
    def __init__(self, *, olympia_conn_id: str = OlympiaHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.olympia_conn_id = olympia_conn_id

    @property
    def hook(self) -> OlympiaHook:
        return OlympiaHook(self.olympia_conn_id)

    def emit(self, context: Context, extra: dict[str, Any],
             changed_objects: Sequence[str] = ()) -> None:
        """Asset events for a committed version: plain Asset outlets get ``extra``; each
        alias gets the catalog's Asset and one event per changed object."""
        events = context["outlet_events"]
        for outlet in self.outlets:
            if isinstance(outlet, AssetAlias):
                events[outlet].add(catalog_asset(self.olympia_conn_id), extra=extra)
                for name in changed_objects:
                    events[outlet].add(object_asset(self.olympia_conn_id, name), extra=extra)
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
    """

    template_fields: Sequence[str] = ("spec_path", "plan", "plan_path", "plan_out",
                                      "variables", "git_commit", "expected_base_version")

    def __init__(self, *, spec_path: str | None = None, plan: Mapping[str, Any] | None = None,
                 plan_path: str | None = None, variables: Mapping[str, str] | None = None,
                 allow_destructive: bool = False, expected_base_version: int | None = None,
                 plan_only: bool = False, plan_out: str | None = None,
                 git_commit: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if sum(x is not None for x in (spec_path, plan, plan_path)) != 1:
            raise ValueError("give exactly one of spec_path, plan and plan_path")
        self.spec_path = spec_path
        self.plan = plan
        self.plan_path = plan_path
        self.variables = variables
        self.allow_destructive = allow_destructive
        self.expected_base_version = expected_base_version
        self.plan_only = plan_only
        self.plan_out = plan_out
        self.git_commit = git_commit

    def execute(self, context: Context) -> dict[str, Any]:
        catalog = self.hook.get_catalog()
        try:
            if self.plan is not None:
                plan = Plan.from_dict(self.plan, "the plan given")
            elif self.plan_path:
                plan = Plan.load(self.plan_path)
            else:
                assert self.spec_path is not None
                plan = make_plan(catalog, load_spec(self.spec_path, self.variables))
            self.log.info("%s", plan.render_text(color=False))
            expected = _optional_int(self.expected_base_version)
            if expected is not None and plan.base_version != expected:
                raise AirflowException(
                    f"the plan's base version is {plan.base_version}, expected "
                    f"{self.expected_base_version}: the catalog moved, re-plan")
            if self.plan_only and not self.plan_out:
                return plan.to_dict()
            if self.plan_only:
                plan.save(self.plan_out)
                return {"plan_path": self.plan_out, "has_changes": plan.has_changes,
                        "summary": plan.summary()}
            info = {"airflow_dag": context["dag"].dag_id, "airflow_run": context["run_id"]}
            if self.git_commit:
                info["git_commit"] = self.git_commit
            result = apply_plan(catalog, plan, allow_destructive=self.allow_destructive,
                                info=info)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        if result.changes:
            self.emit(context, {"version": result.version,
                                "changed_objects": result.changed_objects},
                      result.changed_objects)
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
    new version (None in a dry run), JSON-able."""

    template_fields: Sequence[str] = ("to_version",)

    def __init__(self, *, to_version: int | str = "previous", allow_destructive: bool = False,
                 dry_run: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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
                                     allow_destructive=self.allow_destructive)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.emit(context, {"version": version, "rollback_to": str(self.to_version)})
        return {**preview.to_dict(), "version": version, "dry_run": False}


class OlympiaExportOperator(_OlympiaOperator):
    """Export the latest (or ``version``) as ``name`` to ``target_uri``; returns the record.

    Target storage options come from ``target_conn_id`` (another olympia connection, whose
    catalog URI is ignored) or default to this connection's.
    """

    template_fields: Sequence[str] = ("export_name", "target_uri", "mode", "version")

    def __init__(self, *, export_name: str, target_uri: str, mode: str = "full",
                 version: int | None = None, depth: int | None = None,
                 target_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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
                depth=self.depth)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.emit(context, {"version": result.committed_version, "export": result.name})
        return result.to_dict()


class OlympiaExpireOperator(_OlympiaOperator):
    """Run the PySpark expiry job in-process (``spark_master``, default the connection's
    ``spark_master`` extra or local[2]); returns the job's result."""

    template_fields: Sequence[str] = ("keep_last", "older_than", "grace")

    def __init__(self, *, keep_last: int | None = None, older_than: str | None = None,
                 grace: str | None = None, dry_run: bool = False, force: bool = False,
                 spark_master: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keep_last = keep_last
        self.older_than = older_than
        self.grace = grace
        self.report_only = dry_run  # BaseOperator has a dry_run() method
        self.force = force
        self.spark_master = spark_master

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.hook
        uri, options = hook.settings()
        try:
            policy = ExpirePolicy(
                _optional_int(self.keep_last),
                parse_duration(self.older_than) if self.older_than else None,
                parse_duration(self.grace) if self.grace else None, self.force)
            policy.validate()
            spark = local_session(self.spark_master or hook.spark_master)
            result = expire_with_spark(spark, uri, options, policy, self.report_only)
        except OlympiaError as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("Expired %d versions, deleted %d files (%d failed)%s",
                      result.versions_expired, result.files_deleted, result.files_failed,
                      " [dry run]" if self.report_only else "")
        if result.files_failed:
            raise AirflowException(f"{result.files_failed} files could not be deleted; "
                                   "re-run the job (it is idempotent)")
        return result.to_dict()
