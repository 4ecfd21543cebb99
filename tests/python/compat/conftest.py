"""The compatibility suite: programs in PyTorch's idiom, run with torch and with kiln
standing in for torch. helpers.py lives one folder up."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
