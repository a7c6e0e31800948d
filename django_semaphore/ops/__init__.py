"""What operators use: reading every semaphore at once, pausing, the Redis checks, the Lua libraries.

``overview`` (the status of every semaphore, for ``semaphore_status`` and the
dashboard), ``pausing``, ``redis_check`` and ``memory_check`` (the deployment
checks), ``libraries`` (what ``semaphore_scripts`` lists and cleans). It
imports the engine (``core/``) and nothing of ``web/``; the operator faces
(``dashboard/``, ``management/``) import it.
"""
