"""The request path: everything between an HTTP request and the engine.

What a guarded request goes through (``admission``: its body read first, its
partition from ``partition_keys`` and ``addresses``, its permit, the failure
policy), what it is answered when it is turned away (``responses``,
``response_log``), what is counted (``request_outcomes``), which requests the
middleware's rules match (``rules``), the request path's settings (``conf``)
and checks (``checks``). It imports the engine (``core/``) and nothing of
``ops/``; the faces (``decorators``, ``middleware``) import it.

``usage`` (which semaphores only dry-run rules use) is the request path's
knowledge too; the operator faces (the dashboard, ``semaphore_status``) read
it from here, the one thing they take from this room.
"""
