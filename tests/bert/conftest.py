import pytest

from tests.bert.synthetic import write_dataset


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory):
    """A DATADIR with a tiny model config, 4 synthetic packed shards and a 64-sample eval set."""
    return write_dataset(tmp_path_factory.mktemp("bert_data"))
