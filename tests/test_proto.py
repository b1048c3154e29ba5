"""The generated protobuf modules must match proto/*.proto."""

from olympia._proto.generate import stale_files


def test_generated_code_is_fresh() -> None:
    assert stale_files() == [], "generated protobuf code is stale: run `make proto`"
