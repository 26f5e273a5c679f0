// A second load generator for ZooKeeper: its own Java client, as most of
// its users run it. It checks that arbor-bench's ZooKeeper figures (taken
// through the Rust zookeeper-client crate) are not held down by that client.
//
//   java -cp ... ZkLoad HOST:PORT get|set CONCURRENCY CONNS COUNT [SIZE]
//
// Like arbor-bench's get/set workloads: a key space of 1000 nodes of SIZE
// bytes under /zkload, CONCURRENCY callers spread over CONNS sessions, each
// with one asynchronous request in flight at a time, COUNT requests in all
// after a warm-up of the same length. Prints one JSON line.
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public final class ZkLoad {
    static final int KEYS = 1000;
    static final String ROOT = "/zkload";
    static final int SESSION_TIMEOUT_MS = 30_000;
    static final long CONNECT_WAIT_S = 30;
    static final long RUN_WAIT_S = 600;

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: ZkLoad HOST:PORT get|set CONCURRENCY CONNS COUNT [SIZE]");
            System.exit(2);
        }
        String server = args[0];
        boolean set = switch (args[1]) {
            case "get" -> false;
            case "set" -> true;
            default -> throw new IllegalArgumentException("op must be get or set, not " + args[1]);
        };
        int concurrency = Integer.parseInt(args[2]);
        int conns = Integer.parseInt(args[3]);
        long count = Long.parseLong(args[4]);
        int size = args.length > 5 ? Integer.parseInt(args[5]) : 100;

        ZooKeeper[] sessions = new ZooKeeper[conns];
        for (int i = 0; i < conns; i++) {
            CountDownLatch connected = new CountDownLatch(1);
            sessions[i] = new ZooKeeper(server, SESSION_TIMEOUT_MS, event -> {
                if (event.getState() == org.apache.zookeeper.Watcher.Event.KeeperState.SyncConnected) {
                    connected.countDown();
                }
            });
            if (!connected.await(CONNECT_WAIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no session with " + server);
            }
        }
        byte[] data = new byte[size];
        Arrays.fill(data, (byte) 'x');
        ensure(sessions[0], ROOT, new byte[0]);
        for (int k = 0; k < KEYS; k++) {
            ensure(sessions[0], ROOT + "/k" + k, data);
        }

        run(sessions, set, concurrency, count, data); // warm-up: the JIT on both sides
        long[] latencies = new long[(int) count];
        long started = System.nanoTime();
        run(sessions, set, concurrency, count, data, latencies);
        double secs = (System.nanoTime() - started) / 1e9;
        Arrays.sort(latencies);
        System.out.printf(
                "{\"generator\":\"zookeeper-java\",\"workload\":\"%s\",\"concurrency\":%d,\"conns\":%d,"
                        + "\"ops\":%d,\"secs\":%.3f,\"ops_per_s\":%.1f,\"p50_us\":%d,\"p99_us\":%d,\"p999_us\":%d}%n",
                set ? "set" : "get", concurrency, conns, count, secs, count / secs,
                pct(latencies, 0.50), pct(latencies, 0.99), pct(latencies, 0.999));
        for (ZooKeeper zk : sessions) {
            zk.close();
        }
    }

    static long pct(long[] sorted, double q) {
        return sorted[Math.min(sorted.length - 1, (int) (sorted.length * q))] / 1000;
    }

    static void ensure(ZooKeeper zk, String path, byte[] data) throws Exception {
        try {
            zk.create(path, data, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        } catch (KeeperException.NodeExistsException exists) {
            zk.setData(path, data, -1);
        }
    }

    static void run(ZooKeeper[] sessions, boolean set, int concurrency, long count, byte[] data)
            throws Exception {
        run(sessions, set, concurrency, count, data, null);
    }

    /** Each caller issues its next request from the callback of its last. */
    static void run(ZooKeeper[] sessions, boolean set, int concurrency, long count, byte[] data,
            long[] latencies) throws Exception {
        AtomicLong next = new AtomicLong();
        AtomicReference<String> failure = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(concurrency);
        for (int c = 0; c < concurrency; c++) {
            Caller caller = new Caller(sessions[c % sessions.length], set, count, data, latencies, next,
                    failure, done, c);
            caller.issue();
        }
        if (!done.await(RUN_WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the run did not finish in " + RUN_WAIT_S + " s");
        }
        if (failure.get() != null) {
            throw new IllegalStateException(failure.get());
        }
    }

    static final class Caller implements AsyncCallback.DataCallback, AsyncCallback.StatCallback {
        final ZooKeeper zk;
        final boolean set;
        final long count;
        final byte[] data;
        final long[] latencies;
        final AtomicLong next;
        final AtomicReference<String> failure;
        final CountDownLatch done;
        long seed;
        long index;
        long issued;

        Caller(ZooKeeper zk, boolean set, long count, byte[] data, long[] latencies, AtomicLong next,
                AtomicReference<String> failure, CountDownLatch done, int id) {
            this.zk = zk;
            this.set = set;
            this.count = count;
            this.data = data;
            this.latencies = latencies;
            this.next = next;
            this.failure = failure;
            this.done = done;
            this.seed = 0x9E3779B97F4A7C15L * (id + 1);
        }

        void issue() {
            index = next.getAndIncrement();
            if (index >= count || failure.get() != null) {
                done.countDown();
                return;
            }
            seed ^= seed << 13;
            seed ^= seed >>> 7;
            seed ^= seed << 17;
            String path = ROOT + "/k" + Math.floorMod(seed, KEYS);
            issued = System.nanoTime();
            if (set) {
                zk.setData(path, data, -1, this, null);
            } else {
                zk.getData(path, false, this, null);
            }
        }

        void answered(int rc, String path) {
            if (rc != KeeperException.Code.OK.intValue()) {
                failure.compareAndSet(null, path + ": " + KeeperException.Code.get(rc));
            } else if (latencies != null) {
                latencies[(int) index] = System.nanoTime() - issued;
            }
            issue();
        }

        @Override
        public void processResult(int rc, String path, Object ctx, byte[] value, Stat stat) {
            answered(rc, path);
        }

        @Override
        public void processResult(int rc, String path, Object ctx, Stat stat) {
            answered(rc, path);
        }
    }
}
