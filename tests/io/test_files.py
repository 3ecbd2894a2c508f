import hashlib

import pytest

from evotensor.io.files import file_sha256


class Refused(Exception):
    pass


def test_sha256_of_a_file_and_errors_name_it(tmp_path):
    f = tmp_path / "d.csv"
    f.write_bytes(b"x,y\n1,2\n" * 100_000)  # > 1 MiB: several blocks
    assert file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(Refused, match=r"^--data nope\.csv: no such file$"):
        file_sha256(tmp_path / "nope.csv", "--data nope.csv", error=Refused)
    with pytest.raises(ValueError, match="is a directory"):
        file_sha256(tmp_path)
