"""Package discovery that pyproject.toml cannot express: collectors/ and analyses/ sit beside ddltrace/
(the product's fixed layout) and install as ddltrace.collectors and ddltrace.analyses, subpackages included.
Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = {"ddltrace.collectors": "collectors", "ddltrace.analyses": "analyses"}

packages = find_packages(include=["ddltrace", "ddltrace.*"])
for name, folder in MAPPED.items():
    packages += [name + sub.removeprefix(folder) for sub in find_packages(include=[folder, folder + ".*"])]

setup(packages=packages, package_dir={"ddltrace": "ddltrace", **MAPPED})
