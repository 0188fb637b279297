package lockgate;

/**
 * Who leads an election: its public value (such as its address) and its term,
 * the fencing token of its lock, larger for every new leader.
 */
public record Leader(String value, long term) {}
