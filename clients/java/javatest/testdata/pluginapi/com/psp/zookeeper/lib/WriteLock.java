package com.psp.zookeeper.lib;

public class WriteLock {
  public enum LockTypes {
    FOREGROUND_LOCK, BACKGROUND_LOCK;

    public String getKey() {
      throw new UnsupportedOperationException("signature only");
    }

    public String getValue() {
      throw new UnsupportedOperationException("signature only");
    }
  }
}
