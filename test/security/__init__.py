# The security suite is a package so that its conftest does not take the
# module name `conftest` from test/e2e when both run in one pytest call.
