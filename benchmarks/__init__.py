"""Benchmarks for django-semaphore, run with ``python -m benchmarks`` (or ``make bench``).

Every figure is a ratio or a median over repeats measured side by side in one
run, because the machines these run on are shared and noisy: an absolute
number from another day or another box says little. Benchmarks are not tests;
nothing here asserts a speed.
"""
