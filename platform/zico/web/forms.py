"""Forms of the web UI: the job submit form, generated from the chosen workload's parameter JSON Schema.

Every catalog parameter becomes one labelled field: ``integer`` -> IntegerField, ``number`` -> FloatField,
``enum`` -> ChoiceField, ``string`` -> CharField, with the schema's bounds, description (help text) and the
workload's default (initial value). Django checks types and bounds first; the spec as a whole is then judged
by :func:`zico.jobs.submission.submit_job` — the same check the REST API runs — whose ``JobSpecError.field``
is mapped back onto the form field so the message shows inline next to it.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from zico_workloads.catalog import Workload, list_workloads
from zico.jobs.models import PRIORITY_MAX, PRIORITY_MIN

GIB = 1 << 30
PARAM_PREFIX = "param_"


def param_field(name: str, spec: dict[str, Any], default: Any) -> forms.Field:
    """One form field for the JSON Schema property ``spec`` (see the module docstring)."""
    label = spec.get("title") or (name.upper() if len(name) <= 3 else name.replace("_", " ").capitalize())
    common = {"label": label, "help_text": spec.get("description", ""), "required": False, "initial": default}
    if "enum" in spec:
        return forms.ChoiceField(choices=[(v, v) for v in spec["enum"]], **common)
    kind = spec.get("type")
    if kind == "integer":
        return forms.IntegerField(min_value=spec.get("minimum"), max_value=spec.get("maximum"), **common)
    if kind == "number":
        f = forms.FloatField(min_value=spec.get("minimum"), max_value=spec.get("maximum"), **common)
        f.widget.attrs["step"] = "any"
        return f
    return forms.CharField(max_length=spec.get("maxLength"), min_length=spec.get("minLength"), **common)


class SubmitForm(forms.Form):
    """What the two submit forms share: each invalid input pointed at its inline error message, the error count,
    the budget in bytes."""

    def full_clean(self):
        """Validate, then point each invalid input at its inline error message (aria-describedby)."""
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.mark(name)

    def mark(self, name: str) -> None:
        attrs = self.fields[name].widget.attrs
        ids = [f"id_{name}_error"] + ([f"id_{name}_helptext"] if self.fields[name].help_text else [])
        attrs["aria-describedby"] = " ".join(ids)
        attrs["aria-invalid"] = "true"

    def field_error_count(self) -> int:
        """How many fields carry an error (errors not tied to a field are not counted)."""
        return sum(1 for name in self.errors if name != forms.forms.NON_FIELD_ERRORS)

    def budget_bytes(self) -> int | None:
        gib = self.cleaned_data.get("budget_gib")
        return None if gib is None else int(gib * GIB)


class JobSubmitForm(SubmitForm):
    """Tenant, workload, name, the workload's params, budget (GiB, optional) and priority.

    Args:
        tenants: queryset of tenants the user may submit to (role member or higher).
        workload: the chosen Workload (its params become ``param_<name>`` fields).
    """

    tenant = forms.ModelChoiceField(queryset=None, empty_label=None, label="Tenant")
    workload = forms.ChoiceField(label="Workload")
    name = forms.CharField(max_length=200, required=False, label="Job name",
                           help_text="Optional; shown in lists instead of the workload and number.")
    budget_gib = forms.DecimalField(required=False, min_value=Decimal("0.001"), max_digits=12, decimal_places=3,
                                    label="Memory budget (GiB)",
                                    help_text="Most memory this job may hold; leave empty for no per-job limit.")
    priority = forms.IntegerField(initial=0, min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, label="Priority",
                                  help_text=f"{PRIORITY_MIN} to {PRIORITY_MAX}; higher runs first.")

    def __init__(self, *args, tenants, workload: Workload, **kwargs):
        super().__init__(*args, **kwargs)
        self.workload_obj = workload
        self.fields["tenant"].queryset = tenants
        self.fields["workload"].choices = [(w.key, w.title) for w in list_workloads()]
        self.fields["workload"].initial = workload.key
        props = workload.param_schema.get("properties", {})
        for name, spec in props.items():
            self.fields[PARAM_PREFIX + name] = param_field(name, spec, workload.defaults.get(name))

    def param_fields(self):
        return [self[n] for n in self.fields if n.startswith(PARAM_PREFIX)]

    def limit_fields(self):
        return [self[n] for n in ("budget_gib", "priority")]

    def params(self) -> dict[str, Any]:
        """The params the user filled in (empty fields are left to the workload's defaults)."""
        out = {}
        for name, value in self.cleaned_data.items():
            if name.startswith(PARAM_PREFIX) and value not in (None, ""):
                out[name[len(PARAM_PREFIX):]] = value
        return out

    def add_spec_error(self, field: str, message: str) -> None:
        """Show a ``JobSpecError`` next to the field it names (``params.<name>``, ``budget_bytes``, ...)."""
        target = {"budget_bytes": "budget_gib", "params": None}.get(field, field)
        if field.startswith("params."):
            target = PARAM_PREFIX + field[len("params."):]
        if target not in self.fields:
            target = None
        self.add_error(target, message)
        if target:
            self.mark(target)
