"""Test configuration: put this folder on the path, so that the test files import the NumPy
reference implementations (``reference``) and the shared builders and helpers (``support``,
``flower_support``) as modules."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
