# SPDX-License-Identifier: MIT
"""New generations from Python: a reload is announced to an attached
client, the old Model keeps its bytes, and attaching again gives the new
generation (the switch between passes)."""

import errno
import os
import select
import subprocess
import sys

import pytest
import torch

import wsrv
from conftest import Server, _mkmodel
from st_reader import read_model


def test_reload_announced_and_switched(tmp_path):
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d})
    try:
        with wsrv.connect(srv.sock) as c:
            m = c.attach("m")
            old = m["model.embed_tokens.weight"].torch().clone()
            assert m.generation == 1
            # New weights of the same shapes, and a reload.
            subprocess.run([os.environ["WSRV_MKMODEL"], "--preset", "llama-mini", "--size", "8M",
                            "--layers", "2", "--seed", "9", "--out", d], check=True,
                           stdout=subprocess.DEVNULL)
            c.reload("m")
            r, _, _ = select.select([c.fileno()], [], [], 10)
            assert r, "no announcement within 10 s"
            assert c.poll_events() == 1
            assert (m.generation, m.latest_generation) == (1, 2)
            assert torch.equal(m["model.embed_tokens.weight"].torch(), old)
            m.close()
            with c.attach("m") as m2:
                assert m2.generation == 2
                new = read_model(d)["model.embed_tokens.weight"]
                assert torch.equal(m2.state_dict()["model.embed_tokens.weight"], new)
                assert not torch.equal(new, old)
    finally:
        srv.stop()


def test_a_trainer_publishes(tmp_path):
    """A PyTorch trainer publishes new weights from its own tensors; a
    worker attached before is told, and switches to them, bit for bit."""
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d}, extra=["--allow-publish-uid", str(os.getuid())])
    try:
        with wsrv.connect(srv.sock, name="worker") as w, wsrv.connect(srv.sock, name="trainer") as t:
            worker = w.attach("m")
            trainer = t.attach("m")
            new = {n: trainer[n].torch().clone() for n in trainer}
            for n, x in new.items():
                if x.is_floating_point():
                    new[n] = x * 0.5   # a training step, of sorts
            with trainer.publish() as p:
                for n, x in new.items():
                    p[n].copy_(x)
            assert p.generation == 2
            select.select([w.fileno()], [], [], 10)
            assert w.poll_events() == 1
            worker.close()
            with w.attach("m") as m2:
                assert m2.generation == 2
                for n, x in new.items():
                    assert torch.equal(m2[n].torch(), x), n
            trainer.close()
    finally:
        srv.stop()


def test_a_trainer_publishes_by_write(tmp_path):
    """Publish.write: the same bytes as copying into p[name], through
    write(2); a wrong dtype, a name the model lacks or bytes past a
    tensor's end are refused."""
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d}, extra=["--allow-publish-uid", str(os.getuid())])
    try:
        with wsrv.connect(srv.sock, name="trainer") as t:
            trainer = t.attach("m")
            new = {n: trainer[n].torch().clone() for n in trainer}
            for n, x in new.items():
                if x.is_floating_point():
                    new[n] = x * 0.25
            first = next(iter(new))
            with trainer.publish() as p:
                for n, x in new.items():
                    p.write(n, x)
                with pytest.raises(TypeError):
                    p.write(first, new[first].to(torch.float64))
                with pytest.raises(wsrv.WsrvError):
                    p.write(first, b"x", offset=new[first].numel() * new[first].element_size())
                with pytest.raises(KeyError):
                    p.write("no.such.tensor", b"x")
            assert p.generation == 2
            trainer.close()
            with t.attach("m") as m2:
                for n, x in new.items():
                    assert torch.equal(m2[n].torch(), x), n
    finally:
        srv.stop()


def test_publish_tensors_die_with_their_publish(tmp_path):
    """Issue 37 item 4: a tensor kept past commit() was mapped at the same
    address as the next publish's segment, and writing to it silently
    changed the next generation. Now any use of it (or of a view of it)
    raises, and no later publish lands under it."""
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d}, extra=["--allow-publish-uid", str(os.getuid())])
    name = "model.embed_tokens.weight"
    try:
        with wsrv.connect(srv.sock, name="trainer") as t:
            trainer = t.attach("m")
            want = trainer[name].torch().clone()
            p = trainer.publish()
            kept = p[name]
            view = kept[0]
            kept.copy_(want)
            for n in trainer:
                if n != name:
                    p.write(n, trainer[n].torch())
            addr = kept.data_ptr()
            assert p.commit() == 2
            for use in (lambda: kept.fill_(1), lambda: view.add_(1), lambda: kept.sum(),
                        lambda: kept.clone()):
                try:
                    use()
                    raise AssertionError("a committed publish's tensor was usable")
                except ValueError as e:
                    assert "committed or aborted" in str(e)
            # The next publish (and an aborted one) map elsewhere.
            q = trainer.publish()
            fresh = q[name]
            base, end = fresh.data_ptr(), fresh.data_ptr() + fresh.numel() * fresh.element_size()
            assert not base <= addr < end
            q.abort()
            try:
                fresh.zero_()
                raise AssertionError("an aborted publish's tensor was usable")
            except ValueError:
                pass
            with trainer.publish() as r:
                for n in trainer:
                    r.write(n, trainer[n].torch() * 2 if n == name else trainer[n].torch())
            assert r.generation == 3
            with t.attach("m") as m3:
                assert torch.equal(m3[name].torch(), want * 2)
            trainer.close()
    finally:
        srv.stop()


def test_unwritten_tensors_refused(tmp_path):
    """Issue 79 item 1: `with m.publish() as p: pass` committed a
    generation of zeros, and writing 3 bytes of a 512-byte tensor committed
    it. The commit refuses, naming the tensors never written whole; a
    refused commit leaves the publish open to finish, and the with block
    aborts it; nothing is published either way."""
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d}, extra=["--allow-publish-uid", str(os.getuid())])
    norm = "model.norm.weight"
    try:
        with wsrv.connect(srv.sock, name="trainer") as t:
            trainer = t.attach("m")
            with pytest.raises(wsrv.WsrvError) as e:
                with trainer.publish():
                    pass
            assert e.value.errno == errno.ENODATA
            assert f"{len(list(trainer))} tensors were never written whole" in e.value.message
            size = trainer[norm].torch().numel() * trainer[norm].torch().element_size()
            p = trainer.publish()
            for n in trainer:
                if n != norm:
                    p.write(n, trainer[n].torch())
            p.write(norm, b"\x01" * 3)
            with pytest.raises(wsrv.WsrvError) as e:
                p.commit()
            assert f"1 tensor was never written whole: {norm} (3 of {size} bytes)" in e.value.message
            p.write(norm, trainer[norm].torch() * 0 + 1)  # the rest: the publish stayed open
            assert p.commit() == 2
            with t.attach("m") as m2:
                assert m2.generation == 2
                assert torch.equal(m2[norm].torch(), torch.ones_like(trainer[norm].torch()))
            trainer.close()
    finally:
        srv.stop()


def test_publish_from_the_current_generation(tmp_path):
    """Issue 76 item 3: a trainer that changed one tensor writes it alone
    (publish(base="current")); every other tensor keeps its bytes."""
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d}, extra=["--allow-publish-uid", str(os.getuid())])
    norm = "model.norm.weight"
    try:
        with wsrv.connect(srv.sock, name="trainer") as t:
            trainer = t.attach("m")
            old = {n: trainer[n].torch().clone() for n in trainer}
            with trainer.publish(base="current") as p:
                p[norm].copy_(old[norm] * 2)
            assert p.generation == 2
            with pytest.raises(ValueError):
                trainer.publish(base="previous")
            trainer.close()
            with t.attach("m") as m2:
                for n, x in old.items():
                    assert torch.equal(m2[n].torch(), x * 2 if n == norm else x), n
    finally:
        srv.stop()


def test_publish_refused_without_permission(tmp_path):
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d})
    try:
        with wsrv.connect(srv.sock) as c, c.attach("m") as m:
            try:
                m.publish()
                raise AssertionError("published without permission")
            except wsrv.WsrvError as e:
                assert e.errno == 1 and "--allow-publish-uid" in e.message
    finally:
        srv.stop()
