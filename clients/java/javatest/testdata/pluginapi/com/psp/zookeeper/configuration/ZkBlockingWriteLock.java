package com.psp.zookeeper.configuration;

import java.util.List;

import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ACL;

import com.psp.excception.zookeeper.InstanceLockException;
import com.psp.zookeeper.lib.WriteLock.LockTypes;

public class ZkBlockingWriteLock {
  public ZkBlockingWriteLock(String lockInfo, ZooKeeper zooKeeper, String lockName) {
    throw new UnsupportedOperationException("signature only");
  }

  public ZkBlockingWriteLock(String lockInfo, ZooKeeper zooKeeper, String lockName, LockTypes lockType) {
    throw new UnsupportedOperationException("signature only");
  }

  public ZkBlockingWriteLock(String lockInfo, ZooKeeper zooKeeper, String lockName, LockTypes lockType, List<ACL> acl) {
    throw new UnsupportedOperationException("signature only");
  }

  public void lock() throws InterruptedException, KeeperException, InstanceLockException {
    throw new UnsupportedOperationException("signature only");
  }

  public void lockWithTimeout() throws InterruptedException, KeeperException, InstanceLockException {
    throw new UnsupportedOperationException("signature only");
  }

  public void unlock() {
    throw new UnsupportedOperationException("signature only");
  }

  public String getLockName() {
    throw new UnsupportedOperationException("signature only");
  }
}
