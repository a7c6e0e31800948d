# The Celery app loads with Django, so @shared_task binds to it in the site and the worker alike.
# (Not example_project/celery.py: manage.py runs from this directory, where it would hide Celery itself.)
from .celery_app import app

__all__ = ["app"]
