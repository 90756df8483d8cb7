import pytest

from tests.bert_data.helpers import sample_articles, write_text_dir


@pytest.fixture(scope="session")
def articles() -> list[str]:
    """The bundled Wikipedia sample's articles as text (a sentence per line)."""
    return sample_articles()


@pytest.fixture(scope="session")
def small_text(tmp_path_factory, articles):
    """Three small text parts and an eval file (about 2,500 training sequences)."""
    return write_text_dir(tmp_path_factory.mktemp("text"), articles[:18], parts=3, eval_articles=3)
