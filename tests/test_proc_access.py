"""The capabilities the kernel asks for another process's open files, and which are missing."""

from gpustats.sources import proc_access as pa

STATUS = "Name:\tgpustats\nCapInh:\t0000000000000000\nCapPrm:\t0000000000080004\n" \
         "CapEff:\t0000000000080004\nCapBnd:\t0000000000080004\n"


def test_effective_capabilities_are_parsed_from_status():
    assert pa.parse_effective(STATUS) == 1 << 19 | 1 << 2
    assert pa.parse_effective("Name:\tx\n") is None
    assert pa.parse_effective("CapEff:\tzz\n") is None


def test_the_daemons_own_status_is_read(tmp_path):
    status = tmp_path / "status"
    status.write_text(STATUS)
    assert pa.read_effective(str(status)) == 0x80004
    assert pa.read_effective(str(tmp_path / "gone")) is None
    assert isinstance(pa.read_effective(), int)          # this process's own


def test_missing_names_what_each_read_needs_and_the_daemon_lacks():
    assert pa.missing(pa.READ_FD, 0) == ("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE")
    assert pa.missing(pa.READ_FD, 1 << 19) == ("CAP_DAC_READ_SEARCH",)
    assert pa.missing(pa.READ_FDINFO, 1 << 2) == ("CAP_SYS_PTRACE",)
    assert pa.missing(pa.READ_FD, 0x80004) == () and pa.missing(pa.READ_FDINFO, 0x80004) == ()
    assert pa.missing(pa.READ_FDINFO, None) == ("CAP_SYS_PTRACE",)      # unknown: all needed


def test_refusal_words_name_the_lacking_capability_or_what_else_refuses():
    assert "lacks CAP_DAC_READ_SEARCH" in pa.refusal_words(pa.READ_FD, ("CAP_DAC_READ_SEARCH",))
    words = pa.refusal_words(pa.READ_FDINFO, ())
    assert "holds CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE" in words and "security module" in words
