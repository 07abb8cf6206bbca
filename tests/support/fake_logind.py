#!/usr/bin/python3
"""A stand-in for systemd-logind (and the one systemd call picolet makes) on a private bus.

Usage: fake_logind.py BUS_ADDRESS DELAY_USEC [DROP_IN_PATH]

It owns org.freedesktop.login1 and org.freedesktop.systemd1 and answers:
  - Properties.Get(org.freedesktop.login1.Manager, InhibitDelayMaxUSec): DELAY_USEC;
  - Manager.Inhibit(what, who, why, mode): the write end of a new pipe; the read end is
    watched, and its end of file (the lock closed) is reported;
  - systemd1 Manager.KillUnit(unit, who, signal): when DROP_IN_PATH is given, the delay becomes
    what the drop-in's InhibitDelayMaxSec says, as logind's reload would make it.

Commands on stdin, one a line: "shutdown true", "shutdown false", "exit".
Reports on stdout, one a line: "ready", "inhibit WHAT WHO MODE", "released N" (lock N's
descriptor was closed), "get InhibitDelayMaxUSec", "killunit UNIT WHO SIGNAL".
"""

import os
import re
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

LOGIND = "org.freedesktop.login1"
MANAGER = "org.freedesktop.login1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Logind(dbus.service.Object):
    def __init__(self, bus, delay):
        super().__init__(bus, "/org/freedesktop/login1")
        self.delay = delay
        self.locks = 0

    @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        say("get " + str(name))
        if interface != MANAGER or name != "InhibitDelayMaxUSec":
            raise dbus.exceptions.DBusException(
                "no such property", name="org.freedesktop.DBus.Error.UnknownProperty")
        return dbus.UInt64(self.delay, variant_level=1)

    @dbus.service.method(MANAGER, in_signature="ssss", out_signature="h")
    def Inhibit(self, what, who, why, mode):
        self.locks += 1
        n = self.locks
        r, w = os.pipe()
        say("inhibit %s %s %s" % (what, who, mode))

        def closed(fd, _cond):
            say("released %d" % n)
            os.close(fd)
            return False

        GLib.io_add_watch(r, GLib.PRIORITY_DEFAULT, GLib.IO_HUP | GLib.IO_IN | GLib.IO_ERR, closed)
        fd = dbus.types.UnixFd(w)
        os.close(w)
        return fd

    @dbus.service.signal(MANAGER, signature="b")
    def PrepareForShutdown(self, active):
        pass


class Systemd(dbus.service.Object):
    def __init__(self, bus, logind, drop_in):
        super().__init__(bus, "/org/freedesktop/systemd1")
        self.logind = logind
        self.drop_in = drop_in

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="ssi", out_signature="")
    def KillUnit(self, unit, who, signal):
        say("killunit %s %s %d" % (unit, who, signal))
        if self.drop_in and os.path.exists(self.drop_in):
            with open(self.drop_in) as f:
                m = re.search(r"^InhibitDelayMaxSec=(\d+)$", f.read(), re.M)
            if m:
                self.logind.delay = int(m.group(1)) * 1000000


def main():
    address, delay = sys.argv[1], int(sys.argv[2])
    drop_in = sys.argv[3] if len(sys.argv) > 3 else None
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    logind = Logind(bus, delay)
    systemd = Systemd(bus, logind, drop_in)
    names = [dbus.service.BusName(LOGIND, bus), dbus.service.BusName("org.freedesktop.systemd1", bus)]
    loop = GLib.MainLoop()

    def command(_fd, _cond):
        line = sys.stdin.readline()
        if not line or line.strip() == "exit":
            loop.quit()
            return False
        words = line.split()
        if words[:1] == ["shutdown"]:
            logind.PrepareForShutdown(dbus.Boolean(words[1] == "true"))
            say("sent " + line.strip())
        return True

    GLib.io_add_watch(sys.stdin.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, command)
    say("ready")
    loop.run()
    del names, systemd


if __name__ == "__main__":
    main()
