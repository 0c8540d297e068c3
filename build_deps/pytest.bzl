"""pytest_per_file: one sh_test per pytest file, grouped in a test_suite, and
one sh_test running every file in one pytest session (what CI runs)."""

def pytest_per_file(name, srcs, data, runner, size = "medium", tags = [], **kwargs):
    """Declares `<name>_<file stem>` sh_tests, test_suite `name` and `<name>_all`.

    Each test runs `python -m pytest <file>` through `runner` (see
    build_deps/bazel_pytest.sh) with the interpreter of @local_config_tf.
    `<name>_all` (tagged manual, so that `//...` does not run the files twice)
    runs all of them in one pytest session with two pytest-xdist workers: one
    interpreter start and one TensorFlow import per worker instead of one per
    file (build_deps/bazel_ci.sh runs it).

    Args:
      name: name of the test_suite holding all the tests.
      srcs: the pytest files, e.g. glob(["tests/ops/test_*.py"]).
      data: everything the tests need at run time (conftest, package, library).
      runner: the sh_test script.
      size: Bazel test size of each test ("medium": 5-minute timeout).
      tags: tags for every test and the suite.
      **kwargs: passed to every sh_test.
    """
    tests = []
    for src in srcs:
        stem = src.rpartition("/")[2][:-len(".py")]
        test_name = "{}_{}".format(name, stem)
        native.sh_test(
            name = test_name,
            srcs = [runner],
            args = ["$(rootpath {})".format(src)],
            data = [src] + data,
            size = size,
            tags = tags,
            **kwargs
        )
        tests.append(":" + test_name)
    native.test_suite(
        name = name,
        tests = tests,
        tags = tags,
    )
    native.sh_test(
        name = name + "_all",
        srcs = [runner],
        args = ["$(rootpath {})".format(src) for src in srcs] + ["-n", "2"],
        data = srcs + data,
        size = "large",
        tags = tags + ["manual", "cpu:2"],
        **kwargs
    )
