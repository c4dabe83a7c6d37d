"""``manage.py runconsumer``: the control consumer (device workers' messages and samples -> database)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from zico.telemetry.consumer import ControlConsumer


class Command(BaseCommand):
    help = "Consume device workers' lifecycle messages and memory samples from Redis into the database."

    def add_arguments(self, parser):
        parser.add_argument("--lost-after", type=float, default=None,
                            help="seconds without a heartbeat before a worker is declared lost "
                                 "(default: ZICO_WORKER_LOST_AFTER_S, 15)")
        parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long (tests)")

    def handle(self, *args, lost_after=None, max_seconds=None, **options):
        consumer = ControlConsumer(settings.REDIS_URL, lost_after_s=lost_after)
        self.stdout.write(f"control consumer {consumer.name} reading {settings.REDIS_URL}")
        consumer.run(max_seconds=max_seconds)
