"""WSGI entry point (gunicorn zico.wsgi)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.settings")
application = get_wsgi_application()
