"""The engine: semaphores in Redis, with no knowledge of requests or responses.

Everything here works outside a web request (a management command, a Celery
task, a script); the Django layer around it (decorators, middleware, the
dashboard) only calls in. A test keeps ``django.http`` out of this package.
"""
