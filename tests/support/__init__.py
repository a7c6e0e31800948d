"""Helpers shared by the tests: servers, load, workers, test views and URLconfs."""
