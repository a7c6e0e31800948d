"""The WSGI application gunicorn serves in the web benchmark."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
application = get_wsgi_application()
