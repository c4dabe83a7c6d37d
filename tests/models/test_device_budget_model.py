"""Device budgets: set_budget validates and records a budget_change Event; the database refuses the rest."""
import pytest
from django.db import IntegrityError, transaction

from zico.cluster.models import BudgetError, Device
from zico.jobs.models import Event


def test_set_budget_records_old_and_new_bytes(gpu, personas):
    gpu.set_budget(8 << 30, actor=personas.staff)
    ev = Event.objects.get(kind="budget_change")
    assert ev.device == gpu and ev.actor == personas.staff
    assert ev.details == {"old_bytes": 16 << 30, "new_bytes": 8 << 30}
    assert Device.objects.get(pk=gpu.pk).budget_bytes == 8 << 30


@pytest.mark.parametrize("bad", [-1, (16 << 30) + 1, 1.5, "8", True])
def test_set_budget_refuses_out_of_range_values(gpu, bad):
    with pytest.raises(BudgetError) as err:
        gpu.set_budget(bad)
    assert err.value.field == "budget_bytes"
    assert Device.objects.get(pk=gpu.pk).budget_bytes == 16 << 30
    assert not Event.objects.exists()


def test_the_database_refuses_a_budget_above_the_total(gpu):
    with pytest.raises(IntegrityError), transaction.atomic():
        Device.objects.filter(pk=gpu.pk).update(budget_bytes=(16 << 30) + 1)


def test_the_device_knows_its_queue(gpu):
    assert gpu.queue == "gpu.node-a.0"
