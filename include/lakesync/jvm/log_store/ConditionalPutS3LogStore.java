package io.lakesync.delta;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import io.delta.storage.S3SingleDriverLogStore;

/**
 * Delta's S3 LogStore, with commit files that two writers cannot both create.
 *
 * <p>Why: {@link S3SingleDriverLogStore} (Delta's default for {@code s3} and {@code s3a}) guards a commit file
 * with {@code exists()} and then {@code fs.create(path, false)}. On S3A (hadoop-aws 3.5.0) that create is a
 * plain PUT, so two Spark drivers committing the same version both pass the check, both PUTs succeed, and the
 * second replaces the first: a commit its driver was told had succeeded is silently gone (reproduced on
 * moto; no {@code fs.s3a.*} setting changes it). Here a commit file is written with S3A's conditional create
 * ({@code fs.option.create.conditional.overwrite}), a PUT with {@code If-None-Match: *}: S3 keeps the first
 * and answers the other {@code 412 Precondition Failed}, which becomes
 * {@link java.nio.file.FileAlreadyExistsException}, Delta's signal that another writer took the version.
 * Delta then checks the winner for conflicts and retries at the next version.
 *
 * <p>Everything else is the parent's: reads, listing ({@code delta.enableFastS3AListFrom} included) and
 * overwrite writes. Of the parent's write, Delta 4.4 has only a static per-path lock and the {@code exists()}
 * check (the cache of written paths of older Deltas is gone, so there is none to keep up to date); both are
 * kept for commit files, with a lock of our own because the parent's is private. They no longer carry
 * correctness where the store honours {@code If-None-Match}, but they keep the parent's single-driver
 * guarantee on a store that ignores the header (there, as before, only one driver may write a table), and
 * they cost what the parent's write cost. Where the file system can't create conditionally (not S3A, or
 * {@code fs.s3a.create.conditional.enabled=false}) the parent's write runs, with one warning per JVM: that is
 * what would have run without this class.
 *
 * <p>Not treated as a lost race: {@code 409 ConditionalRequestConflict} (S3's answer when another conditional
 * write of the key is in flight). Whether the key then exists is unknown, and Delta would look for a winning
 * commit that may not be there, so it fails the write as any other error does.
 */
public class ConditionalPutS3LogStore extends S3SingleDriverLogStore {

  private static final Logger LOG = LoggerFactory.getLogger(ConditionalPutS3LogStore.class);

  /** The create option that makes S3A send {@code If-None-Match: *}; also its path capability. */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  /**
   * Per-path locks, striped: bounded memory in a driver that commits for days, at the price of rarely making
   * two unrelated commits of one JVM wait for each other.
   */
  private static final ReentrantLock[] STRIPES = new ReentrantLock[64];

  private static final AtomicBoolean WARNED_UNCONDITIONAL = new AtomicBoolean();

  static {
    for (int i = 0; i < STRIPES.length; i++) {
      STRIPES[i] = new ReentrantLock();
    }
  }

  public ConditionalPutS3LogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path resolved = resolve(fs, path);
    if (overwrite || !fs.hasPathCapability(resolved, CONDITIONAL_CREATE)) {
      if (!overwrite && WARNED_UNCONDITIONAL.compareAndSet(false, true)) {
        LOG.warn("{} can't create files conditionally (not S3A, or fs.s3a.create.conditional.enabled=false):"
            + " Delta commits there are safe against one driver only", fs.getUri());
      }
      super.write(path, actions, overwrite, hadoopConf);
      return;
    }
    ReentrantLock lock = STRIPES[Math.floorMod(resolved.hashCode(), STRIPES.length)];
    try {
      lock.lockInterruptibly();
    } catch (InterruptedException e) {
      throw (InterruptedIOException) new InterruptedIOException(e.getMessage()).initCause(e);
    }
    try {
      if (fs.exists(resolved)) {
        throw new java.nio.file.FileAlreadyExistsException(resolved.toUri().toString());
      }
      createConditionally(fs, resolved, actions);
    } finally {
      lock.unlock();
    }
  }

  /** Writes {@code actions} (one JSON line each) to a new {@code path}, failing if it exists at upload. */
  private static void createConditionally(FileSystem fs, Path path, Iterator<String> actions) throws IOException {
    try {
      FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
      builder.create().overwrite(false).must(CONDITIONAL_CREATE, true);
      FSDataOutputStream out = builder.build();
      try {
        while (actions.hasNext()) {
          out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
      } catch (IOException | RuntimeException | Error e) {
        // S3A uploads on close(): abort instead, so a half-written commit never becomes the version's file.
        abortQuietly(out, e);
        throw e;
      }
      out.close(); // the PUT, and its 412 when another writer created the file first
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw lostRace(path, e);
    } catch (IOException e) {
      if (S3Precondition.failed(e)) {
        throw lostRace(path, e);
      }
      throw e;
    }
  }

  private static void abortQuietly(FSDataOutputStream out, Throwable failure) {
    try {
      out.abort();
    } catch (RuntimeException e) {
      failure.addSuppressed(e);
    }
  }

  private static IOException lostRace(Path path, IOException cause) {
    LOG.info("another writer created {} first (conditional PUT refused); Delta retries at the next version", path);
    IOException lost = new java.nio.file.FileAlreadyExistsException(path.toUri().toString());
    lost.initCause(cause);
    return lost;
  }

  /** The parent's path resolution (private there): qualified, without user info, so both lock the same key. */
  private static Path resolve(FileSystem fs, Path path) {
    URI uri = fs.makeQualified(path).toUri();
    try {
      return new Path(new URI(uri.getScheme(), null, uri.getHost(), uri.getPort(), uri.getPath(),
          uri.getQuery(), uri.getFragment()));
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException(e);
    }
  }

  /**
   * Recognises S3's answer to a failed {@code If-None-Match} by the SDK's status and error code, found in the
   * cause chain (S3A wraps the SDK exception in {@code RemoteFileChangedException}); no message text is read.
   * A class of its own so that the AWS SDK is loaded only once an S3A write has failed.
   */
  static final class S3Precondition {
    private static final int PRECONDITION_FAILED = 412;

    private S3Precondition() {
    }

    static boolean failed(Throwable failure) {
      Throwable t = failure;
      for (int depth = 0; t != null && depth < 16; depth++, t = t.getCause()) {
        if (t instanceof software.amazon.awssdk.awscore.exception.AwsServiceException) {
          software.amazon.awssdk.awscore.exception.AwsServiceException aws =
              (software.amazon.awssdk.awscore.exception.AwsServiceException) t;
          // S3AUtils.translateException maps both to RemoteFileChangedException: the status, and the error
          // code S3 can also send with another status (a failed multipart completion answers 200).
          boolean code = aws.awsErrorDetails() != null
              && "PreconditionFailed".equals(aws.awsErrorDetails().errorCode());
          return aws.statusCode() == PRECONDITION_FAILED || code;
        }
      }
      return false;
    }
  }
}
