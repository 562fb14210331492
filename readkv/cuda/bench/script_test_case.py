"""The base of this folder's script tests: a temporary directory for the files a test writes,
and the script under test run as a program, as scripts/gpu_kernels.sh runs it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest


class ScriptTestCase(unittest.TestCase):
    SCRIPT = None  # the path of the script under test, set by each test class

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, doc):
        """Writes doc (text, or an object as JSON) to a file of the test's directory."""
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, self.SCRIPT, *args], capture_output=True,
                              text=True)
