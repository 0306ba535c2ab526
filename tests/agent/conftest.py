"""Agent test fixtures: a scripted OpenAI-compatible server on loopback for litellm's real path."""

import pytest
from fake_openai_server import FakeOpenAIServer


@pytest.fixture
def fake_openai():
    with FakeOpenAIServer() as server:
        yield server
