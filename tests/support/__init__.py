"""What the tests share that is not a fixture, in modules that are not test modules: imported as `support.<module>`.

pytest puts tests/ on the path (no tests/__init__.py), so a test module imports `support.app`, never
`tests.support.app` (one module under two names is two modules). Fixtures live in tests/conftest.py;
modules here import each other relatively, so the benchmark scripts (tests/bench) can import them as
`tests.support.<module>`. No test module imports another (tests/test_layout.py checks it).
"""
