"""The admin dashboard: the operator's pages for live semaphore state."""
