import os
import socket
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tiny_llama, harness
TINY_LLAMA = os.path.join(HERE, "..", "conformance", "models", "tiny-llama", "config.json")


@pytest.fixture
def tiny_llama_config():
    return TINY_LLAMA


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
