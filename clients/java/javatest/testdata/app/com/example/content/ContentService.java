package com.example.content;

import java.util.concurrent.atomic.AtomicLong;

import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

import com.psp.excception.zookeeper.InstanceLockException;
import com.psp.zookeeper.configuration.ZkBlockingWriteLock;
import com.psp.zookeeper.lib.WriteLock.LockTypes;

/**
 * Web-application code written against the original plugin's lock, as its users wrote it. The Go
 * test compiles it unchanged against the plugin's signatures, then with only its imports changed
 * against clients/java, and runs it against a real sidecar.
 */
public class ContentService {
  private final ZooKeeper zk;
  private final AtomicLong saved = new AtomicLong();

  public ContentService(ZooKeeper zk) {
    this.zk = zk;
  }

  /** A foreground write: waits the configured foreground timeout, else reports "busy". */
  public String saveContent(String monitorObject) throws InterruptedException, KeeperException {
    ZkBlockingWriteLock writeCall = new ZkBlockingWriteLock("Save Content", zk, monitorObject);
    try {
      writeCall.lockWithTimeout();
    } catch (InstanceLockException e) {
      return "busy: " + e.getMessage();
    }
    try {
      saved.incrementAndGet(); // ... modify the monitor object ...
      return "saved " + monitorObject + " under " + writeCall.getLockName();
    } finally {
      writeCall.unlock();
    }
  }

  /** A background job: blocks until granted; ZooKeeper trouble is logged and rethrown. */
  public void propagate(String monitorObject) throws InterruptedException, InstanceLockException {
    ZkBlockingWriteLock bg = new ZkBlockingWriteLock("Bulk Propagation", zk, monitorObject,
        LockTypes.BACKGROUND_LOCK, ZooDefs.Ids.OPEN_ACL_UNSAFE);
    try {
      bg.lock();
      saved.incrementAndGet();
    } catch (KeeperException.ConnectionLossException e) {
      throw new IllegalStateException("zookeeper connection lost: " + e.code(), e);
    } catch (KeeperException e) {
      throw new IllegalStateException("zookeeper: " + e.getMessage(), e);
    } finally {
      bg.unlock();
    }
  }

  public static void main(String[] args) throws Exception {
    ContentService s = new ContentService(null);
    System.out.println(s.saveContent(args[0]));
    s.propagate(args[0]);
    System.out.println("propagated " + args[0] + " " + LockTypes.BACKGROUND_LOCK.getKey());
  }
}
