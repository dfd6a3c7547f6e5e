"""Environment variables: one reader, the usual spellings, clear errors (CPU only)."""
import pytest

from helpers import hardware, settings


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("Yes", True), ("ON", True),
                                            ("", False), ("0", False), ("false", False), ("no", False),
                                            ("Off", False)])
def test_booleans_accept_the_usual_spellings(monkeypatch, value, expected):
    monkeypatch.setenv("SGEMM_BOOK_QUICK", value)
    assert settings.quick() is expected


def test_a_boolean_that_is_not_one_is_an_error(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_QUICK", "maybe")
    with pytest.raises(settings.SettingError, match="SGEMM_BOOK_QUICK='maybe' is not a boolean"):
        settings.quick()


def test_mode_forced_and_invalid(monkeypatch):
    monkeypatch.setenv("SGEMM_BOOK_MODE", "recorded")
    assert not hardware.is_live()
    monkeypatch.setenv("SGEMM_BOOK_MODE", "fast")
    with pytest.raises(settings.SettingError, match="live' or 'recorded"):
        hardware.is_live()
    if not hardware.gpu_available():
        monkeypatch.setenv("SGEMM_BOOK_MODE", "live")
        with pytest.raises(hardware.DeviceError, match="no CUDA GPU"):
            hardware.is_live()


def test_unknown_target_names_the_known_ones(monkeypatch):
    with pytest.raises(hardware.DeviceError, match="sm_75, sm_80, sm_86, sm_89"):
        hardware.Device.emulating("sm_99")
